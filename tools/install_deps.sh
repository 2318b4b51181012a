#!/usr/bin/env bash
# Installs, from Debian's archive, what psrt builds, runs and tests with.
# Idempotent: installs only what is missing. Needs root (or sudo).
#   tools/install_deps.sh main   what ./run.sh main needs: the build
#                                toolchain, the libraries the binaries link,
#                                python3 for deploy/local/launch.py
#   tools/install_deps.sh python main, plus what the Python package builds
#                                and runs with (pybind11, numpy, grpcio)
#   tools/install_deps.sh test   python, plus what the tests, lint, fuzzers,
#                                benchmarks and the image test add (the
#                                default, and what ./run.sh test runs)
# It ends by saying how many packages it installed and their size.
set -euo pipefail

set_name=${1:-test}
main_packages=(
  bazel-bootstrap bazel-rules-java pkg-config g++
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libeigen3-dev libgoogle-glog-dev libgflags-dev
  libcivetweb-dev libcurl4-openssl-dev libgloo-dev libssl-dev libfabric-dev
  prometheus-cpp-dev
  zlib1g-dev liburing-dev python3
)
# The Python package (clients/python): pybind11 and Python's headers for its
# extension, numpy, protobuf and grpcio (for grpc.StatusCode) at run time,
# pip and setuptools to install it.
python_packages=(
  pybind11-dev python3-dev python3-numpy python3-protobuf python3-grpcio
  python3-pip python3-setuptools python3-wheel
)
# The tests' own: GoogleTest and Benchmark; the Python client's tests
# (PyTorch among them); the S3 CLI and s3rver's Node.js; namespaces
# (iproute2); checksums, iperf3 and Chromium for the benchmarks and the
# status page; qemu-user for the CPU-baseline check; clang and lld (the
# ASan pass, libFuzzer, thread-safety analysis), clang-format, black and
# flake8 for lint, with git to list the files; mmdebstrap, umoci and skopeo for the container image;
# LevelDB, LMDB and RocksDB for tools/bench/kv_store_choice.cc.
test_packages=(
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-pytest python3-torch python3-yaml
  dataset-fashion-mnist awscli
  iproute2 procps rhash iperf3 chromium qemu-user
  clang libclang-rt-14-dev lld clang-format universal-ctags black flake8 git
  mmdebstrap umoci skopeo
  librocksdb-dev libleveldb-dev liblmdb-dev
)
case "$set_name" in
  main) packages=("${main_packages[@]}") ;;
  python) packages=("${main_packages[@]}" "${python_packages[@]}") ;;
  test) packages=("${main_packages[@]}" "${python_packages[@]}" "${test_packages[@]}") ;;
  -h | --help)
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "install_deps: unknown set '$set_name' (main or test)" >&2
    exit 2
    ;;
esac
# Node.js and npm run s3rver, the S3 server the checkpoint tests use. A
# machine with Node from elsewhere (e.g. NodeSource, which bundles npm)
# keeps it.
if [[ $set_name == test ]] && ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then
  sudo="sudo"
fi

# From the npm registry, pinned, into /opt/psrt-node: s3rver (the S3
# server the checkpoint tests use; tests find it there or at
# $PSRT_S3RVER), and kubernetes-models, the Prometheus operator's models
# and js-yaml (the Kubernetes API and PodMonitor schemas
# tests/deploy/test_kubernetes.py validates the manifests with).
install_node_tools() {
  [[ $set_name == test ]] || return 0
  local prefix=/opt/psrt-node
  local wanted=(s3rver@3.7.1 kubernetes-models@5.1.0 js-yaml@4.1.0
    @kubernetes-models/prometheus-operator@6.0.0)
  local missing_tools=()
  for tool in "${wanted[@]}"; do
    local name=${tool%@*} version=${tool##*@}
    if ! grep -q "\"version\": \"$version\"" "$prefix/node_modules/$name/package.json" 2>/dev/null; then
      missing_tools+=("$tool")
    fi
  done
  ((${#missing_tools[@]} == 0)) && return
  echo "install_deps: installing ${missing_tools[*]} into $prefix"
  $sudo mkdir -p "$prefix"
  $sudo npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error "${wanted[@]}"
}

# Installed packages and their size in KiB, "count kib".
installed_footprint() {
  dpkg-query -W -f='${db:Status-Abbrev} ${Installed-Size}\n' 2>/dev/null |
    awk '$1 == "ii" { n++; kib += $2 } END { print n + 0, kib + 0 }'
}

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  echo "install_deps ($set_name): all ${#packages[@]} packages present; installed nothing"
  install_node_tools
  exit 0
fi

if [[ -n $sudo ]] && ! command -v sudo >/dev/null; then
  echo "install_deps: need root or sudo to install: ${missing[*]}" >&2
  exit 1
fi
read -r count_before kib_before < <(installed_footprint)
echo "install_deps ($set_name): installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
read -r count_after kib_after < <(installed_footprint)
echo "install_deps ($set_name): installed $((count_after - count_before)) packages" \
  "($(((kib_after - kib_before) / 1024)) MiB) for the ${#missing[@]} named: ${missing[*]}"
install_node_tools

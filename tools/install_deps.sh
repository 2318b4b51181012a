#!/usr/bin/env bash
# Installs, from Debian's archive, everything psrt builds and tests with.
# Idempotent: installs only what is missing. Needs root (or sudo).
#   tools/install_deps.sh            build and test dependencies
#   (PyTorch is included: the Python client's tests and the benchmarks use it.)
#   (LevelDB and LMDB too: tools/bench/kv_store_choice.cc compares them with
#   RocksDB, and the thread-safety check compiles every source.)
set -euo pipefail

packages=(
  bazel-bootstrap bazel-rules-java pkg-config g++
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libeigen3-dev libgoogle-glog-dev libgflags-dev
  libcivetweb-dev libcurl4-openssl-dev libssl-dev prometheus-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-grpcio python3-protobuf python3-numpy python3-pytest
  zlib1g-dev dataset-fashion-mnist liburing-dev librocksdb-dev libleveldb-dev liblmdb-dev
  awscli
  python3-torch python3-setuptools python3-pip python3-wheel python3-yaml
  iproute2 procps rhash iperf3 chromium qemu-user
  clang libclang-rt-14-dev clang-format universal-ctags black flake8
)
# Node.js and npm run s3rver, the S3 server the checkpoint tests use. A
# machine with Node from elsewhere (e.g. NodeSource, which bundles npm)
# keeps it.
if ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# From the npm registry, pinned, into /opt/psrt-node: s3rver (the S3
# server the checkpoint tests use; tests find it there or at
# $PSRT_S3RVER), and kubernetes-models + js-yaml (the Kubernetes API
# schemas tests/deploy/test_kubernetes.py validates the manifests with).
install_node_tools() {
  local prefix=/opt/psrt-node
  local wanted=(s3rver@3.7.1 kubernetes-models@5.1.0 js-yaml@4.1.0)
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

sudo=""
if [[ $(id -u) -ne 0 ]]; then
  sudo="sudo"
fi
if ((${#missing[@]} == 0)); then
  echo "install_deps: all ${#packages[@]} packages present"
  install_node_tools
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install_deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
install_node_tools

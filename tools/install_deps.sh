#!/usr/bin/env bash
# Installs, from Debian's archive, everything psrt builds and tests with.
# Idempotent: installs only what is missing. Needs root (or sudo).
#   tools/install_deps.sh            build and test dependencies
#   tools/install_deps.sh --bench    also PyTorch (the RPC baseline)
set -euo pipefail

packages=(
  bazel-bootstrap bazel-rules-java pkg-config g++
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libeigen3-dev libgoogle-glog-dev libgflags-dev
  libcivetweb-dev libcurl4-openssl-dev libssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-grpcio python3-protobuf python3-numpy python3-pytest
  zlib1g-dev dataset-fashion-mnist
)
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(python3-torch)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  echo "install_deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install_deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"

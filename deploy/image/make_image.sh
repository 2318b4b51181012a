#!/usr/bin/env bash
# Makes psrt's container image without a registry or a Docker daemon: the
# root file system from Debian's archive (mmdebstrap), psrt's binaries
# added, written as an OCI image archive (umoci) that `podman load`,
# `docker load` (after `skopeo copy ... docker-archive:`) and
# `skopeo copy ... docker://` (ECR; docs/operations.md) accept.
#
#   deploy/image/make_image.sh                      # out/image/psrt.oci.tar
#   deploy/image/make_image.sh --sagemaker          # out/image/psrt-sagemaker.oci.tar
#   deploy/image/make_image.sh --sagemaker --base=out/image/psrt.oci.tar
#
# Options (each has a default that works from the repository root after
# `bazel build //ps_server //ps_worker //tools/psctl`):
#   --bin_dir=DIR   where ps_server, ps_worker and psctl are (bazel-bin)
#   --out=FILE      the OCI archive to write (out/image/<name>.oci.tar)
#   --rootfs=DIR    also keep the image's root file system there (the
#                   image test runs the binaries in it); must not exist
#   --mirror=URL    Debian mirror (http://deb.debian.org/debian)
#   --sagemaker     the SageMaker training image: psrt's image with
#                   python3 added and deploy/sagemaker/entry.py as its
#                   entry point
#   --base=FILE     with --sagemaker: those go in one layer on this psrt
#                   image archive (make_image.sh's --out), its binaries
#                   and packages as they are; a registry holding both
#                   images stores the base layer once. Default: a new
#                   root file system, one layer.
# Needs root (mmdebstrap's root mode, umoci keeping file owners) and the
# packages mmdebstrap and umoci (tools/install_deps.sh test installs them).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

bin_dir=$repo/bazel-bin
out=""
rootfs_copy=""
mirror=http://deb.debian.org/debian
sagemaker=false
base=""
for arg in "$@"; do
  case "$arg" in
    --bin_dir=*) bin_dir=${arg#*=} ;;
    --out=*) out=${arg#*=} ;;
    --rootfs=*) rootfs_copy=${arg#*=} ;;
    --mirror=*) mirror=${arg#*=} ;;
    --sagemaker) sagemaker=true ;;
    --base=*) base=${arg#*=} ;;
    -h | --help)
      sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "make_image: unknown argument $arg (see --help)" >&2
      exit 2
      ;;
  esac
done
name=psrt
$sagemaker && name=psrt-sagemaker
out=${out:-$repo/out/image/$name.oci.tar}
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

die() {
  echo "make_image: $*" >&2
  exit 1
}
[[ $(id -u) -eq 0 ]] || die "needs root (mmdebstrap's root mode; umoci keeps file owners)"
for tool in mmdebstrap umoci; do
  command -v "$tool" >/dev/null || die "needs $tool: tools/install_deps.sh test (or apt-get install $tool)"
done
[[ -z "$rootfs_copy" || ! -e "$rootfs_copy" ]] || die "--rootfs=$rootfs_copy already exists"
if [[ -n "$base" ]]; then
  $sagemaker || die "--base is for --sagemaker (its layer goes on a psrt image)"
  [[ -f "$base" ]] || die "--base=$base: no such file"
fi

# A binary from bazel-bin (ps_server/ps_server, tools/psctl/psctl) or a flat
# directory (ps_server).
find_binary() {
  local candidate
  for candidate in "$bin_dir/$1/$1" "$bin_dir/tools/$1/$1" "$bin_dir/$1"; do
    [[ -x "$candidate" ]] && { echo "$candidate"; return; }
  done
  die "no $1 in $bin_dir (bazel build //ps_server //ps_worker //tools/psctl, or --bin_dir)"
}
binaries=()
if [[ -z "$base" ]]; then
  for b in ps_server ps_worker psctl; do
    binaries+=("$(find_binary "$b")")
  done
fi

# The package lists, comments and blank lines dropped, comma-separated.
package_list() {
  grep -hv '^\s*\(#\|$\)' "$@" | tr -s ' \n' ',' | sed 's/,$//'
}
packages=$(package_list "$here/runtime-packages.txt")

work=$(mktemp -d)
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
layout=$work/oci
bundle=$work/bundle

ports=(--config.exposedports=2223/tcp --config.exposedports=3223/tcp)
entrypoint=(--config.entrypoint=ps_server)
env=(--config.env=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
if [[ -n "$base" ]]; then
  echo "make_image: $name: a layer on $base"
  mkdir "$layout"
  tar -C "$layout" -xf "$base" || die "--base=$base: not a tar archive"
  umoci unpack --image "$layout:latest" "$bundle" >/dev/null ||
    die "--base=$base: no OCI image tagged latest in it (make_image.sh --out writes one)"
  [[ -x "$bundle/rootfs/usr/local/bin/ps_server" ]] ||
    die "--base=$base: no /usr/local/bin/ps_server in it: not a psrt image"
else
  echo "make_image: $name: Debian 12 (bookworm) minbase + ${packages//,/ }"
  umoci init --layout "$layout"
  umoci new --image "$layout:latest"
  umoci unpack --image "$layout:latest" "$bundle" >/dev/null
  start=$SECONDS
  mmdebstrap --quiet --variant=minbase --include="$packages" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    bookworm "$bundle/rootfs" "$mirror"
  echo "make_image: root file system in $((SECONDS - start)) s"
  install -m 0755 "${binaries[@]}" "$bundle/rootfs/usr/local/bin/"
  # Container runtimes mount their own /etc/hosts over this one; a bare
  # chroot or unshare still resolves localhost (the default cluster).
  printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' \
    >"$bundle/rootfs/etc/hosts"
fi

if $sagemaker; then
  # The SageMaker layer: its packages installed by the image's own apt
  # (its sources and dpkg's excludes as mmdebstrap left them), the host's
  # resolver lent for the download.
  IFS=, read -ra extra <<<"$(package_list "$here/sagemaker-packages.txt")"
  echo "make_image: $name: + ${extra[*]}"
  start=$SECONDS
  resolv=$bundle/rootfs/etc/resolv.conf
  [[ -e "$resolv" ]] && mv "$resolv" "$work/resolv.conf.image"
  cp -L /etc/resolv.conf "$resolv"
  chroot "$bundle/rootfs" /usr/bin/env -i PATH="$PATH" DEBIAN_FRONTEND=noninteractive \
    sh -c 'apt-get -qq update && apt-get -qq install -y --no-install-recommends "$@" &&
      apt-get clean && rm -rf /var/lib/apt/lists/* /var/log/apt/* /var/log/dpkg.log' \
    apt-install "${extra[@]}" >"$work/apt.log" 2>&1 ||
    die "installing ${extra[*]} in the image failed: $(tail -20 "$work/apt.log")"
  rm -f "$resolv"
  [[ -e "$work/resolv.conf.image" ]] && mv "$work/resolv.conf.image" "$resolv"
  echo "make_image: packages installed in $((SECONDS - start)) s"
  install -D -m 0755 "$repo/deploy/sagemaker/entry.py" "$bundle/rootfs/opt/psrt/entry.py"
  # SageMaker's TensorFlow layout: ps on 2223, worker on 2222; the entry
  # points' status on 2224.
  ports=(--clear=config.exposedports --config.exposedports=2222/tcp
    --config.exposedports=2223/tcp --config.exposedports=2224/tcp)
  entrypoint=(--clear=config.entrypoint --config.entrypoint=python3
    --config.entrypoint=/opt/psrt/entry.py)
  env+=(--config.env=PSRT_BIN_DIR=/usr/local/bin --config.env=PYTHONUNBUFFERED=1)
fi

start=$SECONDS
umoci repack --image "$layout:latest" "$bundle"
umoci config --image "$layout:latest" --architecture=amd64 --os=linux \
  --config.workingdir=/ "${entrypoint[@]}" "${ports[@]}" "${env[@]}" \
  --author="psrt deploy/image/make_image.sh"
umoci gc --layout "$layout"
mkdir -p "$(dirname "$out")"
tar -C "$layout" -cf "$out.tmp" .
mv "$out.tmp" "$out"
echo "make_image: wrote $out ($(du -m "$out" | cut -f1) MiB; layer in $((SECONDS - start)) s)"
if [[ -n "$rootfs_copy" ]]; then
  mv "$bundle/rootfs" "$rootfs_copy"
  echo "make_image: root file system kept in $rootfs_copy"
fi

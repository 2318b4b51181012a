#!/usr/bin/env bash
# The measurement behind the SSD tier's choice of store (docs/benchmarks.md):
# RocksDB, LevelDB and LMDB from Debian on the tier's access pattern, with
# `dd` writing the same bytes to the same disk as the disk's own figure.
#   tools/bench/kv_store_choice.sh [ROWS] [ROW_BYTES] [DIR]
set -euo pipefail
rows=${1:-2000000}
row_bytes=${2:-64}
dir=${3:-${TMPDIR:-/tmp}/psrt-kv-choice}
here=$(cd "$(dirname "$0")" && pwd)
apt_missing=$(for p in librocksdb-dev libleveldb-dev liblmdb-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || echo "$p"
done)
if [[ -n "$apt_missing" ]]; then
  echo "installing $apt_missing" >&2
  apt-get install -y -q $apt_missing >/dev/null
fi
bin=$(mktemp)
g++ -O2 -std=c++17 -o "$bin" "$here/kv_store_choice.cc" -lrocksdb -lleveldb -llmdb
mkdir -p "$dir"
mb=$(( rows * (row_bytes + 8) / 1048576 + 1 ))
rm -f "$dir/dd"
echo "dd: $(dd if=/dev/zero of="$dir/dd" bs=1M count=$mb conv=fdatasync 2>&1 | tail -1)"
rm -f "$dir/dd"
for store in rocksdb leveldb lmdb; do
  rm -rf "${dir:?}/$store" && mkdir -p "$dir/$store"
  /usr/bin/time -f "         peak RSS %M KiB" "$bin" "$store" "$dir/$store" "$rows" "$row_bytes"
  echo "         on disk: $(du -sh "$dir/$store" | cut -f1)"
  rm -rf "${dir:?}/$store"
done
rm -f "$bin"

// What a restore reads from storage: MANIFEST.json (parsed and checked as
// CommitCheckpoint and --restore do) and shard data files (magic, CRC32C,
// trailer, sizes). The first byte picks which.
#include <cstdint>
#include <string>

#include "ps_server/checkpoint/checkpoint_catalog.h"
#include "ps_server/checkpoint/shard_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    auto manifest = psrt::ParseManifest(bytes, "fuzz");
    if (manifest.ok()) (void)psrt::ManifestJson(*manifest);
    return 0;
  }
  auto contents = psrt::DecodeShardFile(bytes, "fuzz");
  if (contents.ok()) {
    // Touch every row id the file claims, as a restore does.
    int64_t sum = 0;
    for (int64_t i = 0; i < contents->header.num_rows(); ++i) {
      sum += contents->Id(i);
    }
    (void)sum;
  }
  return 0;
}

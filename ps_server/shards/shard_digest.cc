#include "ps_server/shards/shard_digest.h"

#include <algorithm>
#include <vector>

#include "partitioner/id_hash.h"
#include "util/crc32c.h"

namespace psrt {

int64_t DigestChunkRows(const Shard& shard) {
  // At most 4096 rows or 4 MiB a read (one row at least: a dense row can
  // hold millions of floats), and no more rows than the shard has.
  constexpr int64_t kMaxChunkRows = 4096;
  constexpr int64_t kChunkBytes = int64_t{4} << 20;
  const int64_t row_bytes =
      std::max<int64_t>(1, shard.row_stride()) * sizeof(float);
  return std::max<int64_t>(
      1, std::min({kMaxChunkRows, kChunkBytes / row_bytes, shard.num_rows()}));
}

uint64_t ShardDigest(const Shard& shard) {
  const int64_t kChunkRows = DigestChunkRows(shard);
  const int64_t stride = shard.row_stride();
  std::vector<int64_t> ids(kChunkRows);
  std::vector<float> rows(static_cast<size_t>(kChunkRows * stride));
  uint64_t digest = 0;
  // Rows read by position in several calls: none may move in between.
  shard.PinRows(true);
  for (int64_t first = 0;; first += kChunkRows) {
    int64_t version = 0;
    const int64_t n =
        shard.ExportRows(first, kChunkRows, ids.data(), rows.data(), &version);
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t crc =
          Crc32c(rows.data() + i * stride, sizeof(float) * stride);
      digest += MixId(static_cast<int64_t>(MixId(ids[i]) ^ crc));
    }
    if (n < kChunkRows) break;
  }
  shard.PinRows(false);
  return digest;
}

}  // namespace psrt

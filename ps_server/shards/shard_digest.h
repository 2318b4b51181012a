// A digest of everything a shard holds (ids, values, optimizer slots) that
// does not depend on row order: two copies of a shard have equal digests
// when they hold the same rows with the same bits, whatever order their
// rows were created in (a hash shard's backup may create rows in another
// order than its primary). For comparing replicas (psctl replicas), not
// for security: it is a sum of per-row 64-bit hashes.
#ifndef PSRT_PS_SERVER_SHARDS_SHARD_DIGEST_H_
#define PSRT_PS_SERVER_SHARDS_SHARD_DIGEST_H_

#include <cstdint>

#include "ps_server/shards/shard.h"

namespace psrt {

// Reads the shard in chunks of rows, each under the shard's lock: a shard
// being updated meanwhile gives a digest of no single version.
uint64_t ShardDigest(const Shard& shard);

// The rows ShardDigest reads at a time: 4096 at most, 4 MiB at most (one
// row at least), and no more than the shard holds. Its memory is this
// many rows.
int64_t DigestChunkRows(const Shard& shard);

}  // namespace psrt

#endif  // PSRT_PS_SERVER_SHARDS_SHARD_DIGEST_H_

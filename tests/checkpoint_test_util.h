// Helpers for checkpoint tests: the variables they train, a training load
// of concurrent pushes, and a checkpoint's logical contents (every row of
// every variable by global row/id) read back with the checkpoint library.
#ifndef PSRT_TESTS_CHECKPOINT_TEST_UTIL_H_
#define PSRT_TESTS_CHECKPOINT_TEST_UTIL_H_

#include <atomic>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "clients/cpp/client.h"
#include "proto/ps.pb.h"
#include "storage/storage.h"

namespace psrt {

// One variable of every kind and optimizer (slots 0, 1 and 2), sharded
// `shards_per_ps_count` ways where a real model would use one shard per PS.
std::vector<VariableSpec> CheckpointTestSpecs(int shards);

// Pushes random gradients to every variable from `workers` threads (the
// step numbers advance the servers' global step) until `stop` is set.
// Returns the pushes made; `pushed`, if given, counts them as they go.
int64_t TrainUntil(const ClientOptions& options, int workers,
                   const std::atomic<bool>& stop, int min_pushes_per_worker,
                   std::atomic<int64_t>* pushed = nullptr);

struct CheckpointContents {
  CheckpointManifest manifest;
  // variable -> global row/id -> [values | slots].
  std::map<std::string, std::map<int64_t, std::vector<float>>> rows;
  // variable -> shard -> version.
  std::map<std::string, std::map<int, int64_t>> versions;
};

// Reads one checkpoint (its URI) completely, verifying every file.
absl::StatusOr<CheckpointContents> ReadCheckpoint(
    const std::string& uri, const S3Options& s3 = S3Options());

// "" if equal, else the first difference.
std::string CompareRows(const CheckpointContents& a,
                        const CheckpointContents& b);

// Pulls every row of every variable from a running cluster and compares
// the values with `c` (exactly). "" if equal.
std::string ComparePulledValues(Client* client, const CheckpointContents& c);

}  // namespace psrt

#endif  // PSRT_TESTS_CHECKPOINT_TEST_UTIL_H_

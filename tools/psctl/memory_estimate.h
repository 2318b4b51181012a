// The sizing rule for a PS's memory (docs/operations.md, "Sizing a PS"):
// what each ps_server holds for a catalog of variables on N PS, placed as
// the servers place them (partitioner/shard_map.h):
//
//   bytes(PS) = kProcessBaseBytes
//             (+ kDataPlaneBaseBytes + (R - 1) x kDataPlanePerBackupBytes
//                with the data plane)
//             + sum over its shards of rows x row width x 4 x (1 + slots)
//             + rows of its HASH_EMBEDDING shards x kHashRowOverheadBytes
//
// slots: SGD 0, Momentum 1, Adagrad 1, Adam 2, FTRL 2. A HASH_EMBEDDING
// holds the rows it has seen (its capacity when bounded, else the rows the
// caller expects). Its per-row overhead is the id index, the row's id and
// its last step. The limit to give a container adds kLimitHeadroom for
// what comes and goes (pull and push buffers, a checkpoint's chunks).
// With --replicas=R every PS also keeps backups of R-1 others' shards:
// about R times its own share. Not counted: the admission sketch (fixed per
// table, its spec's size), the SSD tier's index (about 20 bytes per spilled
// row), push de-duplication (bounded: psrt_push_dedup_bytes).
//
// Checked against ps_server's resident memory by //tests:sizing_test.
#ifndef PSRT_TOOLS_PSCTL_MEMORY_ESTIMATE_H_
#define PSRT_TOOLS_PSCTL_MEMORY_ESTIMATE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/ps.pb.h"

namespace psrt {

// An idle ps_server's resident memory (Debian 12, x86-64, optimized
// build; 23 MiB measured).
inline constexpr int64_t kProcessBaseBytes = int64_t{24} << 20;
// What --data_plane=fabric adds to it (libfabric's rxm buffers, 1.7 MiB
// of them, its other pools and libraries; 9.8-10.0 MiB measured).
inline constexpr int64_t kDataPlaneBaseBytes = int64_t{10} << 20;
// And per backup with --replicas > 1: the endpoint its forwards leave
// from and the backup's connection to it (libfabric's pools; 10.0 and
// 8.4 MiB measured at R=2 and R=3).
inline constexpr int64_t kDataPlanePerBackupBytes = int64_t{12} << 20;
// Per row of a hash embedding: its index entry (16-byte slot and a control
// byte, at a load between 7/16 and 7/8), its id and its last step (8 each).
inline constexpr int64_t kHashRowOverheadBytes = 64;
// Limit = estimate x (1 + kLimitHeadroom).
inline constexpr double kLimitHeadroom = 0.25;

struct PsMemoryEstimate {
  int64_t parameter_bytes = 0;  // parameters and optimizer slots
  int64_t hash_rows = 0;        // rows of its hash embedding shards
  int64_t row_overhead_bytes = 0;
  int64_t total_bytes = 0;  // base + parameters + overhead, times replicas
  int64_t limit_bytes = 0;  // total x (1 + kLimitHeadroom)
};

// One estimate per PS task. `specs` as a client creates them (normalized
// here); `unbounded_hash_rows`: rows each HASH_EMBEDDING without a capacity
// (and without eviction's max_rows) is expected to reach, over all its
// shards. Errors name the spec that does not normalize.
// What a PS holds before its tables: kProcessBaseBytes, plus with the
// data plane (`data_plane`: --data_plane=fabric) its base and an endpoint
// per backup (`replicas` - 1).
int64_t PsBaseBytes(int replicas, bool data_plane);

// `data_plane`: the PS serves --data_plane=fabric.
absl::StatusOr<std::vector<PsMemoryEstimate>> EstimatePsMemory(
    std::vector<VariableSpec> specs, int num_ps, int64_t unbounded_hash_rows,
    int replicas = 1, bool data_plane = false);

}  // namespace psrt

#endif  // PSRT_TOOLS_PSCTL_MEMORY_ESTIMATE_H_

// Where every shard of every variable lives: variable -> shards -> PS tasks,
// and id -> (shard, local row) routing.
//
// The map is a pure function of (ordered list of specs, number of PS tasks):
// every client and server computes it independently and gets the same
// answer. Shards are cut along dim 0 as TF's fixed_size_partitioner
// (num_shards) or variable_axis_size_partitioner (max_shard_bytes) cut them:
// the first rows % n shards get one extra row. Placement walks the catalog in
// order, shard by shard: ROUND_ROBIN takes the next PS of a cluster-wide
// cycle, GREEDY_BYTES the PS with the fewest bytes so far (TF's
// GreedyLoadBalancingStrategy); both count parameters plus optimizer slots.
#ifndef PSRT_PARTITIONER_SHARD_MAP_H_
#define PSRT_PARTITIONER_SHARD_MAP_H_

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "partitioner/id_hash.h"
#include "proto/ps.pb.h"

namespace psrt {

// Rows a HASH_EMBEDDING with unbounded capacity is assumed to hold when its
// shards are weighed for GREEDY_BYTES placement.
inline constexpr int64_t kUnboundedHashRowsForPlacement = int64_t{1} << 20;

struct ShardLayout {
  int shard = 0;
  int ps_task = 0;
  int64_t row_begin = 0;  // DIV: first global row; MOD and HASH: 0
  int64_t num_rows = 0;   // HASH: row capacity of the shard, 0 = unbounded
  int64_t bytes = 0;      // planned parameter + slot bytes
};

struct VariableLayout {
  VariableSpec spec;  // normalized
  int index = 0;      // position in the catalog
  int64_t rows = 0;   // dim 0 (HASH: capacity, 0 = unbounded)
  int64_t row_width = 1;
  int num_slots = 0;
  std::vector<ShardLayout> shards;

  int num_shards() const { return static_cast<int>(shards.size()); }
  VariableKind kind() const { return spec.kind(); }
  PartitionSpec::Routing routing() const { return spec.partition().routing(); }

  // Shard holding global row/id `id`. REQUIRES: for DIV and MOD,
  // 0 <= id < rows.
  int ShardOf(int64_t id) const {
    const int64_t n = num_shards();
    switch (routing()) {
      case PartitionSpec::DIV: {
        const int64_t q = rows / n, extra = rows % n;
        const int64_t big = extra * (q + 1);
        return static_cast<int>(id < big ? id / (q + 1)
                                         : extra + (id - big) / q);
      }
      case PartitionSpec::MOD:
        return static_cast<int>(id % n);
      default:
        return static_cast<int>(MixId(id) % static_cast<uint64_t>(n));
    }
  }

  // Row index of `id` inside its shard (DIV and MOD only).
  int64_t LocalRow(int shard, int64_t id) const {
    return routing() == PartitionSpec::DIV ? id - shards[shard].row_begin
                                           : id / num_shards();
  }

  // Inverse of LocalRow: the global row of a shard's local row.
  int64_t GlobalRow(int shard, int64_t local) const {
    return routing() == PartitionSpec::DIV ? shards[shard].row_begin + local
                                           : local * num_shards() + shard;
  }
};

class ShardMap {
 public:
  explicit ShardMap(int num_ps);

  // Appends a variable to the catalog and places its shards. The spec must
  // be normalized (NormalizeVariableSpec) and its name new.
  absl::Status Add(const VariableSpec& spec);

  // Removes the variable added last, undoing its placement (an Add whose
  // shards could not be filled). Other variables' pointers stay valid.
  // REQUIRES: the map is not empty.
  void PopBack();

  // nullptr if absent. Pointers stay valid as variables are added.
  const VariableLayout* Find(absl::string_view name) const;

  const std::deque<VariableLayout>& variables() const { return variables_; }
  int num_ps() const { return num_ps_; }

  // Planned bytes per PS task.
  const std::vector<int64_t>& bytes_per_ps() const { return load_; }

 private:
  int num_ps_;
  std::deque<VariableLayout> variables_;
  absl::flat_hash_map<std::string, int> by_name_;
  std::vector<int64_t> load_;
  int64_t next_round_robin_ = 0;
};

}  // namespace psrt

#endif  // PSRT_PARTITIONER_SHARD_MAP_H_

#include "partitioner/shard_map.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "partitioner/variable_spec.h"

namespace psrt {
namespace {

constexpr int64_t kMaxShards = 65536;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

ShardMap::ShardMap(int num_ps) : num_ps_(num_ps), load_(num_ps, 0) {}

absl::Status ShardMap::Add(const VariableSpec& spec) {
  if (by_name_.contains(spec.name())) {
    return absl::AlreadyExistsError(
        absl::StrCat("variable '", spec.name(), "' is already in the map"));
  }
  VariableLayout v;
  v.spec = spec;
  v.index = static_cast<int>(variables_.size());
  v.rows = NumRows(spec);
  v.row_width = RowWidth(spec);
  v.num_slots = NumOptimizerSlots(spec.optimizer().kind());
  const int64_t row_bytes = v.row_width * 4 * (1 + v.num_slots);
  const bool hashed = spec.kind() == HASH_EMBEDDING;

  const PartitionSpec& p = spec.partition();
  int64_t n = 1;
  if (p.num_shards() > 0) {
    n = p.num_shards();
  } else if (p.max_shard_bytes() > 0) {
    n = CeilDiv(v.rows * v.row_width * 4, p.max_shard_bytes());
  }
  if (!(hashed && v.rows == 0)) n = std::min(n, v.rows);
  n = std::clamp<int64_t>(n, 1, kMaxShards);

  const int64_t q = v.rows / n, extra = v.rows % n;
  for (int64_t s = 0; s < n; ++s) {
    ShardLayout shard;
    shard.shard = static_cast<int>(s);
    int64_t weight_rows;
    if (hashed) {
      shard.num_rows = v.rows == 0 ? 0 : CeilDiv(v.rows, n);
      weight_rows = v.rows == 0 ? CeilDiv(kUnboundedHashRowsForPlacement, n)
                                : shard.num_rows;
    } else if (p.routing() == PartitionSpec::MOD) {
      shard.num_rows = CeilDiv(v.rows - s, n);
      weight_rows = shard.num_rows;
    } else {
      shard.row_begin = s * q + std::min(s, extra);
      shard.num_rows = q + (s < extra ? 1 : 0);
      weight_rows = shard.num_rows;
    }
    shard.bytes = weight_rows * row_bytes;
    if (p.placement() == PartitionSpec::GREEDY_BYTES) {
      shard.ps_task = static_cast<int>(
          std::min_element(load_.begin(), load_.end()) - load_.begin());
    } else {
      shard.ps_task = static_cast<int>(next_round_robin_++ % num_ps_);
    }
    load_[shard.ps_task] += shard.bytes;
    v.shards.push_back(shard);
  }
  by_name_[spec.name()] = v.index;
  variables_.push_back(std::move(v));
  return absl::OkStatus();
}

void ShardMap::PopBack() {
  const VariableLayout& v = variables_.back();
  for (const ShardLayout& shard : v.shards) {
    load_[shard.ps_task] -= shard.bytes;
    if (v.spec.partition().placement() != PartitionSpec::GREEDY_BYTES) {
      --next_round_robin_;
    }
  }
  by_name_.erase(v.spec.name());
  variables_.pop_back();
}

const VariableLayout* ShardMap::Find(absl::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &variables_[it->second];
}

}  // namespace psrt

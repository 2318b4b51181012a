#include "clients/cpp/step_plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "clients/cpp/id_index.h"
#include "util/finite.h"

namespace psrt {
namespace {

// An op's ids reduced to unique ids, each with its first row.
struct UniqueIds {
  std::vector<int64_t> ids;
  std::vector<int32_t> first_row;
  // For each request row, the index of its id in `ids`.
  std::vector<int32_t> unique_index;
  bool has_repeats = false;
};

UniqueIds Deduplicate(absl::Span<const int64_t> ids, bool promised_unique) {
  UniqueIds u;
  if (promised_unique) {
    u.ids.assign(ids.begin(), ids.end());
    u.first_row.resize(ids.size());
    for (size_t i = 0; i < ids.size(); ++i)
      u.first_row[i] = static_cast<int32_t>(i);
    return u;
  }
  IdIndex index(ids.size());
  u.unique_index.resize(ids.size());
  u.first_row.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i + IdIndex::kPrefetchDistance < ids.size()) {
      index.Prefetch(ids[i + IdIndex::kPrefetchDistance]);
    }
    bool inserted;
    u.unique_index[i] = index.Insert(ids[i], &inserted);
    if (inserted) {
      u.first_row.push_back(static_cast<int32_t>(i));
    } else {
      u.has_repeats = true;
    }
  }
  u.ids = index.TakeIds();
  return u;
}

absl::StatusOr<const VariableLayout*> Lookup(const ShardMap& catalog,
                                             const std::string& name,
                                             bool has_ids, const void* buffer,
                                             const char* what) {
  const VariableLayout* layout = catalog.Find(name);
  if (layout == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "unknown variable '", name,
        "' (not in this client's catalog; CreateVariables or RefreshCatalog "
        "first)"));
  }
  if (buffer == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " of '", name, "': null buffer"));
  }
  if (layout->kind() == DENSE && has_ids) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " of '", name, "': a DENSE variable takes no ids"));
  }
  return layout;
}

absl::Status CheckIds(const VariableLayout& layout,
                      absl::Span<const int64_t> ids, const char* what) {
  if (ids.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " of '", layout.spec.name(), "': more than 2^31 ids in one op"));
  }
  if (layout.kind() != EMBEDDING) return absl::OkStatus();
  for (int64_t id : ids) {
    if (id < 0 || id >= layout.rows) {
      return absl::OutOfRangeError(
          absl::StrCat(what, " of '", layout.spec.name(), "': id ", id,
                       " is outside the vocabulary: ids must lie in [0, ",
                       layout.rows, ")"));
    }
  }
  return absl::OkStatus();
}

// Splits an op's unique ids by shard: per shard, the unique indices it
// holds (in order).
std::vector<std::vector<int32_t>> GroupByShard(
    const VariableLayout& layout, const std::vector<int64_t>& ids) {
  const int n = layout.num_shards();
  std::vector<std::vector<int32_t>> groups(n);
  if (n == 1) {
    groups[0].resize(ids.size());
    for (size_t u = 0; u < ids.size(); ++u)
      groups[0][u] = static_cast<int32_t>(u);
    return groups;
  }
  std::vector<int32_t> shard(ids.size());
  if (layout.routing() == PartitionSpec::HASH) {
    // ShardOf's hash case without its per-id switch (most of a step's
    // routing: a 64-bit modulo per id).
    const uint64_t shards = static_cast<uint64_t>(n);
    for (size_t u = 0; u < ids.size(); ++u) {
      shard[u] = static_cast<int32_t>(MixId(ids[u]) % shards);
    }
  } else {
    for (size_t u = 0; u < ids.size(); ++u) shard[u] = layout.ShardOf(ids[u]);
  }
  std::vector<size_t> counts(n);
  for (int32_t s : shard) ++counts[s];
  for (int s = 0; s < n; ++s) groups[s].reserve(counts[s]);
  for (size_t u = 0; u < ids.size(); ++u) {
    groups[shard[u]].push_back(static_cast<int32_t>(u));
  }
  return groups;
}

// GroupByShard of the ops of one plan, computed once for ops over the same
// ids routed the same way (a model's tables of one step: the linear weights
// and the factors of the same ids).
class ShardGroups {
 public:
  const std::vector<std::vector<int32_t>>& Of(const VariableLayout& layout,
                                              absl::Span<const int64_t> op_ids,
                                              bool ids_unique,
                                              const std::vector<int64_t>& ids) {
    const bool same =
        valid_ && op_ids.data() == op_ids_.data() &&
        op_ids.size() == op_ids_.size() && ids_unique == ids_unique_ &&
        layout.num_shards() == num_shards_ && layout.routing() == routing_ &&
        (layout.routing() == PartitionSpec::HASH || layout.rows == rows_);
    if (!same) {
      groups_ = GroupByShard(layout, ids);
      valid_ = true;
      op_ids_ = op_ids;
      ids_unique_ = ids_unique;
      num_shards_ = layout.num_shards();
      routing_ = layout.routing();
      rows_ = layout.rows;
    }
    return groups_;
  }

 private:
  bool valid_ = false;
  absl::Span<const int64_t> op_ids_;
  bool ids_unique_ = false;
  int num_shards_ = 0;
  PartitionSpec::Routing routing_ = PartitionSpec::HASH;
  int64_t rows_ = 0;
  std::vector<std::vector<int32_t>> groups_;
};

// One item per shard of a dense variable: the shard's slice of `out` (pull)
// or of `grad` (push).
void AddDenseShards(const VariableLayout& v, float* out, const float* grad,
                    float learning_rate, StepPlan* plan, bool assign = false) {
  for (const ShardLayout& s : v.shards) {
    PlannedItem item;
    item.layout = &v;
    item.shard = s.shard;
    item.learning_rate = learning_rate;
    item.assign = assign;
    item.count = s.num_rows * v.row_width;
    const int64_t first = s.row_begin * v.row_width;
    if (out != nullptr) item.dense_out = out + first;
    if (grad != nullptr) item.dense_grad = grad + first;
    plan->items_by_ps[s.ps_task].push_back(std::move(item));
  }
}

// Every gradient the plan would send is finite (after repeats are summed):
// a push is checked whole before anything goes to any PS, so a bad value
// anywhere changes nothing anywhere.
absl::Status CheckFinite(const StepPlan& plan) {
  for (const std::vector<PlannedItem>& items : plan.items_by_ps) {
    for (const PlannedItem& item : items) {
      const bool dense = item.layout->kind() == DENSE;
      const float* grad = dense ? item.dense_grad : item.grad_rows();
      const size_t n = static_cast<size_t>(item.value_floats());
      const size_t bad = FirstNonFinite(grad, n);
      if (bad == n) continue;
      const ShardLayout& shard = item.layout->shards[item.shard];
      const std::string where =
          dense ? absl::StrCat("element ", shard.row_begin * item.width() +
                                               static_cast<int64_t>(bad))
                : absl::StrCat("the row of id ", item.ids[bad / item.width()],
                               " (summed over its repeats)");
      return absl::InvalidArgumentError(absl::StrCat(
          "push of '", item.layout->spec.name(), "': gradient ", where, " is ",
          grad[bad], "; nothing was sent to any PS"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<StepPlan> PlanPull(const ShardMap& catalog,
                                  absl::Span<const PullOp> ops) {
  StepPlan plan;
  plan.items_by_ps.resize(catalog.num_ps());
  ShardGroups shard_groups;
  for (const PullOp& op : ops) {
    auto layout = Lookup(catalog, op.variable, !op.ids.empty(), op.out, "pull");
    if (!layout.ok()) return layout.status();
    const VariableLayout& v = **layout;
    if (v.kind() == DENSE) {
      AddDenseShards(v, op.out, nullptr, 0, &plan);
      continue;
    }
    if (absl::Status st = CheckIds(v, op.ids, "pull"); !st.ok()) return st;
    UniqueIds u = Deduplicate(op.ids, op.ids_unique);
    plan.rows += static_cast<int64_t>(op.ids.size());
    const std::vector<std::vector<int32_t>>& groups =
        shard_groups.Of(v, op.ids, op.ids_unique, u.ids);
    for (int s = 0; s < v.num_shards(); ++s) {
      if (groups[s].empty()) continue;
      PlannedItem item;
      item.layout = &v;
      item.shard = s;
      item.rows_out = op.out;
      item.ids.reserve(groups[s].size());
      item.out_rows.reserve(groups[s].size());
      for (int32_t index : groups[s]) {
        item.ids.push_back(u.ids[index]);
        item.out_rows.push_back(u.first_row[index]);
      }
      plan.items_by_ps[v.shards[s].ps_task].push_back(std::move(item));
    }
    if (u.has_repeats) {
      for (size_t i = 0; i < op.ids.size(); ++i) {
        const int32_t first = u.first_row[u.unique_index[i]];
        if (first != static_cast<int32_t>(i)) {
          plan.repeated_rows.push_back({op.out + i * v.row_width,
                                        op.out + first * v.row_width,
                                        v.row_width});
        }
      }
    }
  }
  return plan;
}

absl::StatusOr<StepPlan> PlanPush(const ShardMap& catalog,
                                  absl::Span<const PushOp> ops) {
  StepPlan plan;
  plan.items_by_ps.resize(catalog.num_ps());
  ShardGroups shard_groups;
  for (const PushOp& op : ops) {
    auto layout =
        Lookup(catalog, op.variable, !op.ids.empty(), op.grad, "push");
    if (!layout.ok()) return layout.status();
    const VariableLayout& v = **layout;
    if (!(std::isfinite(op.learning_rate) && op.learning_rate >= 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("push of '", op.variable, "': learning_rate ",
                       op.learning_rate, " must be finite and >= 0"));
    }
    if (v.kind() == DENSE) {
      AddDenseShards(v, nullptr, op.grad, op.learning_rate, &plan, op.assign);
      continue;
    }
    if (op.assign) {
      return absl::InvalidArgumentError(
          absl::StrCat("push of '", op.variable,
                       "': values can be assigned to dense "
                       "variables only; it is ",
                       VariableKind_Name(v.kind())));
    }
    if (absl::Status st = CheckIds(v, op.ids, "push"); !st.ok()) return st;
    const int64_t width = v.row_width;
    UniqueIds u = Deduplicate(op.ids, op.ids_unique);
    plan.rows += static_cast<int64_t>(op.ids.size());
    // Where each unique id's row lands: (item, row within the item).
    std::vector<std::pair<int32_t, int32_t>> slot(u.ids.size());
    const std::vector<std::vector<int32_t>>& groups =
        shard_groups.Of(v, op.ids, op.ids_unique, u.ids);
    // Per shard: (PS, index in that PS's item list); pointers would dangle as
    // the lists grow.
    std::vector<std::pair<int, size_t>> items(v.num_shards());
    for (int s = 0; s < v.num_shards(); ++s) {
      if (groups[s].empty()) continue;
      auto& list = plan.items_by_ps[v.shards[s].ps_task];
      list.emplace_back();
      PlannedItem& item = list.back();
      item.layout = &v;
      item.shard = s;
      item.learning_rate = op.learning_rate;
      item.ids.reserve(groups[s].size());
      item.grads = BufferPool::Default().Acquire(groups[s].size() * width *
                                                 sizeof(float));
      for (size_t j = 0; j < groups[s].size(); ++j) {
        const int32_t index = groups[s][j];
        item.ids.push_back(u.ids[index]);
        std::memcpy(item.grad_rows() + j * width,
                    op.grad + static_cast<int64_t>(u.first_row[index]) * width,
                    width * sizeof(float));
        slot[index] = {s, static_cast<int32_t>(j)};
      }
      items[s] = {v.shards[s].ps_task, list.size() - 1};
    }
    if (u.has_repeats) {
      for (size_t i = 0; i < op.ids.size(); ++i) {
        const int32_t index = u.unique_index[i];
        if (u.first_row[index] == static_cast<int32_t>(i)) continue;
        const auto [ps, at] = items[slot[index].first];
        float* sum = plan.items_by_ps[ps][at].grad_rows() +
                     static_cast<int64_t>(slot[index].second) * width;
        const float* g = op.grad + i * width;
        for (int64_t c = 0; c < width; ++c) sum[c] += g[c];
      }
    }
  }
  if (absl::Status s = CheckFinite(plan); !s.ok()) return s;
  return plan;
}

}  // namespace psrt

#include "ps_worker/row_cache.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "partitioner/id_hash.h"

namespace psrt {
namespace {

// Bytes of a slot beyond its floats: id, pulled-at step, dirty flag.
constexpr int64_t kSlotOverheadBytes = 8 + 8 + 1;

// Ids looked up this far ahead are prefetched.
constexpr size_t kPrefetchDistance = 16;

}  // namespace

absl::StatusOr<RowCache> RowCache::Create(std::vector<int> dims, int staleness,
                                          int64_t max_bytes) {
  if (staleness < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "row cache staleness ", staleness, ": must be at least 1"));
  }
  if (dims.empty()) {
    return absl::InvalidArgumentError("row cache for no tables");
  }
  for (int dim : dims) {
    if (dim < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("row cache table of dim ", dim));
    }
  }
  const int64_t row_floats = std::accumulate(dims.begin(), dims.end(), 0);
  const int64_t slot_bytes =
      2 * row_floats * static_cast<int64_t>(sizeof(float)) + kSlotOverheadBytes;
  const int64_t fit = std::min<int64_t>(max_bytes / slot_bytes, 1 << 30);
  if (fit < 1) {
    return absl::InvalidArgumentError(absl::StrCat("row cache of ", max_bytes,
                                                   " bytes holds no row of ",
                                                   slot_bytes, " bytes"));
  }
  int64_t slots = 1;
  while (slots * 2 <= fit) slots *= 2;
  return RowCache(std::move(dims), staleness, slots);
}

RowCache::RowCache(std::vector<int> dims, int staleness, int64_t slots)
    : dims_(std::move(dims)),
      row_floats_(std::accumulate(dims_.begin(), dims_.end(), 0)),
      staleness_(staleness),
      mask_(static_cast<size_t>(slots) - 1),
      slots_(slots),
      floats_(2 * static_cast<size_t>(slots) * row_floats_),
      dirty_(slots),
      stored_at_(staleness + 2) {}

size_t RowCache::SlotOf(int64_t id) const {
  // Mixed (feature ids are often hashes already, but vocabulary ids are
  // dense and small).
  return static_cast<size_t>(MixId(id)) & mask_;
}

std::vector<int32_t>& RowCache::StoredAt(int64_t step) {
  const int64_t ring = static_cast<int64_t>(stored_at_.size());
  return stored_at_[((step % ring) + ring) % ring];
}

void RowCache::Lookup(int64_t step, absl::Span<const int64_t> unique_ids,
                      std::vector<std::vector<float>>* tables, StepRows* rows) {
  const size_t n = unique_ids.size();
  rows->step = step;
  rows->generation = generation_;
  rows->slots.resize(n);
  rows->misses.clear();
  lookups_ += static_cast<int64_t>(n);
  for (size_t i = 0; i < n; ++i) {
    if (i + kPrefetchDistance < n) {
      const size_t ahead = SlotOf(unique_ids[i + kPrefetchDistance]);
      __builtin_prefetch(&slots_[ahead]);
      __builtin_prefetch(values(ahead));
    }
    const size_t slot = SlotOf(unique_ids[i]);
    const Slot& s = slots_[slot];
    if (s.id != unique_ids[i] || s.pulled_at + staleness_ <= step) {
      rows->slots[i] = -1;
      rows->misses.push_back(static_cast<int32_t>(i));
      continue;
    }
    rows->slots[i] = static_cast<int32_t>(slot);
    ++hits_;
    const float* from = values(slot);
    for (size_t t = 0; t < dims_.size(); ++t) {
      std::memcpy((*tables)[t].data() + i * dims_[t], from,
                  dims_[t] * sizeof(float));
      from += dims_[t];
    }
  }
}

void RowCache::Store(absl::Span<const int64_t> unique_ids,
                     const std::vector<std::vector<float>>& tables,
                     StepRows* rows) {
  if (rows->generation != generation_) return;  // emptied since Lookup
  std::vector<int32_t>& stored = StoredAt(rows->step);
  const std::vector<int32_t>& misses = rows->misses;
  for (size_t m = 0; m < misses.size(); ++m) {
    if (m + kPrefetchDistance < misses.size()) {
      const size_t ahead = SlotOf(unique_ids[misses[m + kPrefetchDistance]]);
      __builtin_prefetch(&slots_[ahead], 1);
      __builtin_prefetch(values(ahead), 1);
    }
    const int32_t i = misses[m];
    const size_t slot = SlotOf(unique_ids[i]);
    Slot& s = slots_[slot];
    // Rows whose validity ended were dropped by the Accumulate before, so
    // a slot in use holds a row some step still reads (or sums of one):
    // this id goes uncached.
    if (s.pulled_at != kFree) continue;
    float* to = values(slot);
    for (size_t t = 0; t < dims_.size(); ++t) {
      std::memcpy(to, tables[t].data() + size_t{1} * i * dims_[t],
                  dims_[t] * sizeof(float));
      to += dims_[t];
    }
    std::fill_n(to, row_floats_, 0.0f);  // the gradient sums
    s.id = unique_ids[i];
    s.pulled_at = rows->step;
    dirty_[slot] = 0;
    rows->slots[i] = static_cast<int32_t>(slot);
    stored.push_back(static_cast<int32_t>(slot));
    ++rows_;
  }
}

void RowCache::PreparePush(size_t most_rows, Push* push) const {
  push->ids.clear();
  push->ids.reserve(most_rows);
  push->grads.resize(dims_.size());
  for (size_t t = 0; t < dims_.size(); ++t) {
    push->grads[t].clear();
    push->grads[t].reserve(most_rows * dims_[t]);
  }
  push->flushed = 0;
  push->uncached = 0;
}

void RowCache::Flush(size_t slot, Push* push) {
  push->ids.push_back(slots_[slot].id);
  float* from = sums(slot);
  for (size_t t = 0; t < dims_.size(); ++t) {
    push->grads[t].insert(push->grads[t].end(), from, from + dims_[t]);
    std::fill_n(from, dims_[t], 0.0f);
    from += dims_[t];
  }
  dirty_[slot] = 0;
  ++push->flushed;
}

void RowCache::Accumulate(absl::Span<const int64_t> unique_ids,
                          const std::vector<std::vector<float>>& grads,
                          const StepRows& rows, Push* push) {
  const int64_t step = rows.step;
  PreparePush(unique_ids.size() + StoredAt(step + 1 - staleness_).size() +
                  StoredAt(step + 2 - staleness_).size(),
              push);
  const bool current = rows.generation == generation_;
  const size_t n = unique_ids.size();
  for (size_t i = 0; i < n; ++i) {
    if (current && i + kPrefetchDistance < n &&
        rows.slots[i + kPrefetchDistance] >= 0) {
      __builtin_prefetch(sums(rows.slots[i + kPrefetchDistance]), 1);
    }
    const int32_t slot = current ? rows.slots[i] : -1;
    if (slot < 0) {
      push->ids.push_back(unique_ids[i]);
      for (size_t t = 0; t < dims_.size(); ++t) {
        const float* g = grads[t].data() + i * dims_[t];
        push->grads[t].insert(push->grads[t].end(), g, g + dims_[t]);
      }
      ++push->uncached;
      continue;
    }
    float* to = sums(slot);
    for (size_t t = 0; t < dims_.size(); ++t) {
      const float* g = grads[t].data() + i * dims_[t];
      for (int d = 0; d < dims_[t]; ++d) to[d] += g[d];
      to += dims_[t];
    }
    dirty_[slot] = 1;
  }
  // Rows pulled at step + 1 - S were read for the last time by this step,
  // rows pulled at step + 2 - S will be by the next one: both are pulled
  // again by the pulls sent after this push (the next step's pull is
  // already on its way), so their sums go now. The first are dropped.
  for (int64_t pulled = step + 1 - staleness_; pulled <= step + 2 - staleness_;
       ++pulled) {
    const bool last_use = pulled == step + 1 - staleness_;
    std::vector<int32_t>& stored = StoredAt(pulled);
    for (size_t k = 0; k < stored.size(); ++k) {
      if (k + kPrefetchDistance < stored.size()) {
        const int32_t ahead = stored[k + kPrefetchDistance];
        __builtin_prefetch(&slots_[ahead], 1);
        __builtin_prefetch(&dirty_[ahead]);
        __builtin_prefetch(sums(ahead));
      }
      const int32_t slot = stored[k];
      if (slots_[slot].pulled_at != pulled) continue;
      if (dirty_[slot]) Flush(slot, push);
      if (last_use) {
        slots_[slot].pulled_at = kFree;
        --rows_;
      }
    }
    if (last_use) stored.clear();
  }
}

void RowCache::TakeAll(Push* push) {
  PreparePush(static_cast<size_t>(rows_), push);
  for (auto& stored : stored_at_) {
    for (int32_t slot : stored) {
      if (slots_[slot].pulled_at == kFree) continue;
      if (dirty_[slot]) Flush(slot, push);
      slots_[slot].pulled_at = kFree;
    }
    stored.clear();
  }
  rows_ = 0;
  ++generation_;
}

}  // namespace psrt

#include "ps_server/shards/row_shard.h"

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "util/finite.h"

namespace psrt {

void SaveRowForUndo(const float* from, int64_t floats, float* to) {
  if (floats % 4 != 0 || reinterpret_cast<uintptr_t>(to) % 16 != 0) {
    std::memcpy(to, from, floats * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < floats; i += 4) {
    _mm_stream_ps(to + i, _mm_loadu_ps(from + i));
  }
}

void FinishSavingRows() { _mm_sfence(); }

absl::Status NonFiniteRowError(int64_t id, int64_t column, float value,
                               float old) {
  return absl::InvalidArgumentError(absl::StrCat(
      "the update would make the row of id ", id, " ", value, " at float ",
      column, " of its values and slots (from ", old, ")"));
}

bool RowShard::HasRepeatedIds(const ShardUpdate& update) const {
  const std::vector<int64_t>& ids = update.ids;
  if (ids.size() < 2) return false;
  absl::flat_hash_set<int64_t> seen;
  seen.reserve(ids.size());
  for (int64_t id : ids) {
    if (!seen.insert(id).second) return true;
  }
  return false;
}

absl::Status RowShard::Prepare(ShardUpdate* u, float scale) {
  // Rows are created before anything is locked: if a shard is full nothing
  // is updated (rows created meanwhile hold their initial values, which
  // pulls of absent ids return anyway).
  if (absl::Status s =
          EnsureRows(u->ids, &u->rows, &u->rows_epoch,
                     u->primary_dropped ? &*u->primary_dropped : nullptr);
      !s.ok()) {
    return s;
  }
  if (scale != 1.0f || HasRepeatedIds(*u)) {
    // Repeated ids become one row holding the sum of their gradients.
    const int64_t width = row_width();
    absl::flat_hash_map<int64_t, size_t> position;
    std::vector<int64_t> unique;
    std::vector<size_t> slot_of(u->ids.size());
    std::vector<uint32_t> unique_rows;
    const bool has_rows = u->rows.size() == u->ids.size();
    for (size_t i = 0; i < u->ids.size(); ++i) {
      auto [it, inserted] = position.emplace(u->ids[i], unique.size());
      if (inserted) {
        unique.push_back(u->ids[i]);
        if (has_rows) unique_rows.push_back(u->rows[i]);
      }
      slot_of[i] = it->second;
    }
    u->merged.assign(unique.size() * width, 0.0f);
    ForEachGradientRow(u->grads, width, [&](size_t i, const float* g) {
      float* sum = u->merged.data() + slot_of[i] * width;
      for (int64_t c = 0; c < width; ++c) sum[c] += g[c];
    });
    for (float& x : u->merged) x *= scale;
    // Sums of finite gradients may overflow: then unknown, and the rows
    // are checked as they are applied.
    u->max_abs_grad = MaxAbsOrInf(u->merged.data(), u->merged.size());
    u->ids = std::move(unique);
    u->rows = std::move(unique_rows);
    u->grads = {PayloadView::Contiguous(u->merged.data(),
                                        u->merged.size() * sizeof(float))};
  }
  return absl::OkStatus();
}

absl::Status RowShard::CheckLocked(ShardUpdate* update) {
  if (absl::Status s = RefreshRowsLocked(update); !s.ok()) return s;
  bounds_.Clear(*update, VersionLocked(), optimizer(),
                [&] { return ExactBoundsLocked(); });
  return absl::OkStatus();
}

absl::Status RowShard::ApplyLocked(const ShardUpdate& update, float* undo) {
  absl::Status applied =
      ApplyUpdateLocked(update, bounds_.Cleared(update) ? nullptr : undo);
  bounds_.Applied(update, VersionLocked());
  return applied;
}

}  // namespace psrt

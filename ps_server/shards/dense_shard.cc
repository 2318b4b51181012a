#include "ps_server/shards/dense_shard.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "util/finite.h"
#include "util/parallel_for.h"
#include "util/thread_pool.h"

namespace psrt {
namespace {
// Updates and reads of at least this many floats use several threads: they
// sit on the critical path of the worker waiting for them.
constexpr int64_t kParallelFloats = int64_t{1} << 18;  // 1 MiB
}  // namespace

DenseShard::DenseShard(const VariableLayout& layout, int shard,
                       const Optimizer* optimizer, const Initializer& init,
                       bool initialize)
    : optimizer_(optimizer),
      width_(layout.row_width),
      row_begin_(layout.shards[shard].row_begin),
      size_(layout.shards[shard].num_rows * layout.row_width) {
  const int64_t width = layout.row_width;
  const int64_t first_row = layout.shards[shard].row_begin;
  if (!initialize) {
    params_ = AllocateZeroFloats(size_);
    for (int k = 0; k < optimizer_->num_slots(); ++k) {
      slots_[k] = AllocateZeroFloats(size_);
    }
    return;
  }
  params_ = AllocateFloats(size_);
  float* params = params_.get();
  ParallelFor(layout.shards[shard].num_rows, 1 << 16,
              [&](int64_t begin, int64_t end) {
                init.FillRows(first_row + begin, end - begin, width,
                              params + begin * width);
              });
  for (int k = 0; k < optimizer_->num_slots(); ++k) {
    slots_[k] = AllocateFloats(size_);
    std::fill_n(slots_[k].get(), size_, optimizer_->initial_slot_value(k));
  }
}

int64_t DenseShard::bytes() const {
  return size_ * sizeof(float) * (1 + optimizer_->num_slots());
}

int64_t DenseShard::version() const {
  absl::ReaderMutexLock lock(&mu_);
  return version_;
}

int64_t DenseShard::Read(int64_t offset, int64_t count, float* out) const {
  absl::ReaderMutexLock lock(&mu_);
  const float* from = params_.get() + offset;
  if (count < kParallelFloats) {
    std::memcpy(out, from, count * sizeof(float));
  } else {
    PoolParallelFor(
        count, kParallelFloats / 2, [&](int64_t begin, int64_t end) {
          std::memcpy(out + begin, from + begin, (end - begin) * sizeof(float));
        });
  }
  return version_;
}

int64_t DenseShard::ExportRows(int64_t first, int64_t count, int64_t* ids,
                               float* out, int64_t* version) const {
  absl::ReaderMutexLock lock(&mu_);
  return ExportRowsLocked(first, count, ids, out, version);
}

int64_t DenseShard::ExportRowsLocked(int64_t first, int64_t count, int64_t* ids,
                                     float* out, int64_t* version) const {
  count = std::clamp<int64_t>(num_rows() - first, 0, count);
  if (ids != nullptr) {
    for (int64_t r = 0; r < count; ++r) ids[r] = row_begin_ + first + r;
  }
  const int slots = optimizer_->num_slots();
  const int64_t stride = row_stride();
  for (int64_t r = 0; out != nullptr && r < count; ++r) {
    const int64_t at = (first + r) * width_;
    float* row = out + r * stride;
    std::memcpy(row, params_.get() + at, width_ * sizeof(float));
    for (int k = 0; k < slots; ++k) {
      std::memcpy(row + (k + 1) * width_, slots_[k].get() + at,
                  width_ * sizeof(float));
    }
  }
  *version = version_;
  return count;
}

absl::Status DenseShard::ImportRows(absl::Span<const int64_t> ids,
                                    const float* rows) {
  const int slots = optimizer_->num_slots();
  const int64_t stride = row_stride();
  absl::MutexLock lock(&mu_);
  bounds_.Invalidate();
  for (size_t r = 0; r < ids.size(); ++r) {
    const int64_t at = (ids[r] - row_begin_) * width_;
    const float* row = rows + r * stride;
    std::memcpy(params_.get() + at, row, width_ * sizeof(float));
    for (int k = 0; k < slots; ++k) {
      std::memcpy(slots_[k].get() + at, row + (k + 1) * width_,
                  width_ * sizeof(float));
    }
  }
  return absl::OkStatus();
}

void DenseShard::RestoreVersion(int64_t version) {
  absl::MutexLock lock(&mu_);
  version_ = version;
}

void DenseShard::Apply(absl::Span<const Piece> pieces, float learning_rate) {
  absl::MutexLock lock(&mu_);
  ApplyRangesLocked(pieces, learning_rate);
}

absl::Status DenseShard::Prepare(ShardUpdate* update, float scale) {
  if (update->assign && scale != 1.0f) {
    return absl::InvalidArgumentError(
        "assigned values cannot be combined with other workers' gradients "
        "(a SYNC step)");
  }
  if (scale == 1.0f) return absl::OkStatus();
  int64_t lo = INT64_MAX, hi = 0;
  for (const Piece& p : update->ranges) {
    lo = std::min(lo, p.offset);
    hi = std::max(hi, p.offset + p.count);
  }
  update->merged.assign(hi - lo, 0.0f);
  for (const Piece& p : update->ranges) {
    float* out = update->merged.data() + (p.offset - lo);
    ForEachFloatRun(p.grad, [&](const float* g, size_t n, size_t first) {
      for (size_t i = 0; i < n; ++i) out[first + i] += g[i];
    });
  }
  for (float& x : update->merged) x *= scale;
  // Sums of finite gradients may overflow: then unknown (a dry run).
  update->max_abs_grad =
      MaxAbsOrInf(update->merged.data(), update->merged.size());
  update->ranges = {
      {lo, hi - lo,
       PayloadView::Contiguous(update->merged.data(),
                               update->merged.size() * sizeof(float))}};
  return absl::OkStatus();
}

absl::Status DenseShard::CheckLocked(ShardUpdate* update) {
  // Assigned values were checked finite as they arrived.
  if (update->assign) return absl::OkStatus();
  if (bounds_.Clear(*update, version_, *optimizer_,
                    [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
                      return ExactBoundsLocked();
                    })) {
    return absl::OkStatus();
  }
  return CheckRangesLocked(update->ranges, update->learning_rate);
}

absl::Status DenseShard::ApplyLocked(const ShardUpdate& update, float* undo) {
  if (update.assign) {
    for (const Piece& piece : update.ranges) {
      float* const to = params_.get() + piece.offset;
      ForEachFloatRun(piece.grad, [&](const float* v, size_t n, size_t first) {
        std::memcpy(to + first, v, n * sizeof(float));
      });
    }
    bounds_.Invalidate();
    return absl::OkStatus();
  }
  ApplyRangesLocked(update.ranges, update.learning_rate);
  bounds_.Applied(update, version_);
  return absl::OkStatus();
}

ValueBounds DenseShard::ExactBoundsLocked() const {
  ValueBounds bounds = ValueBounds::Empty();
  for (int i = 0; i <= optimizer_->num_slots(); ++i) {
    bounds.Cover(i, i == 0 ? params_.get() : slots_[i - 1].get(), size_);
  }
  return bounds;
}

// Calls fn(piece) for every piece; on several threads when the update is
// big (pieces are disjoint ranges). A big update is applied after its whole
// push has arrived, so it is on the critical path of the pushing worker.
template <typename Fn>
static void ForEachPiece(absl::Span<const DenseShard::Piece> pieces, Fn&& fn) {
  int64_t floats = 0;
  for (const DenseShard::Piece& piece : pieces) floats += piece.count;
  if (floats < kParallelFloats || pieces.size() < 2) {
    for (const DenseShard::Piece& piece : pieces) fn(piece);
  } else {
    PoolParallelFor(static_cast<int64_t>(pieces.size()), 1,
                    [&](int64_t begin, int64_t end) {
                      for (int64_t i = begin; i < end; ++i) fn(pieces[i]);
                    });
  }
}

absl::Status DenseShard::CheckRangesLocked(absl::Span<const Piece> pieces,
                                           float learning_rate) const {
  const UpdateContext context =
      MakeUpdateContext(*optimizer_, learning_rate, version_ + 1);
  // Read under mu_ here: the runs below may execute on pool threads,
  // which the analysis cannot see holding it (the caller does).
  const float* const params = params_.get();
  const float* const slot_base[2] = {slots_[0].get(), slots_[1].get()};
  absl::Mutex bad_mu;
  int64_t bad_at = -1;
  float bad_value = 0;
  ForEachPiece(pieces, [&](const Piece& piece) {
    ForEachFloatRun(piece.grad, [&](const float* g, size_t n, size_t first) {
      const int64_t at = piece.offset + static_cast<int64_t>(first);
      const float* slots[2] = {slot_base[0] ? slot_base[0] + at : nullptr,
                               slot_base[1] ? slot_base[1] + at : nullptr};
      float value;
      const size_t i = optimizer_->FirstNonFiniteResult(params + at, slots, g,
                                                        n, context, &value);
      if (i == n) return;
      absl::MutexLock lock(&bad_mu);
      if (bad_at < 0 || at + static_cast<int64_t>(i) < bad_at) {
        bad_at = at + static_cast<int64_t>(i);
        bad_value = value;
      }
    });
  });
  if (bad_at < 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("the update would make element ", bad_at, " of the shard ",
                   bad_value, " (from ", params_.get()[bad_at], ")"));
}

void DenseShard::ApplyRangesLocked(absl::Span<const Piece> pieces,
                                   float learning_rate) {
  const UpdateContext context =
      MakeUpdateContext(*optimizer_, learning_rate, version_ + 1);
  // As in CheckRangesLocked: the runs may execute on pool threads.
  float* const params = params_.get();
  float* const slot_base[2] = {slots_[0].get(), slots_[1].get()};
  ForEachPiece(pieces, [&](const Piece& piece) {
    ForEachFloatRun(piece.grad, [&](const float* g, size_t n, size_t first) {
      const int64_t at = piece.offset + static_cast<int64_t>(first);
      float* slots[2] = {slot_base[0] ? slot_base[0] + at : nullptr,
                         slot_base[1] ? slot_base[1] + at : nullptr};
      optimizer_->Apply(params + at, slots, g, n, context);
    });
  });
  ++version_;
}

}  // namespace psrt

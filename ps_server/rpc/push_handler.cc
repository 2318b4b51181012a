#include "ps_server/rpc/push_handler.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/buffer_pool.h"
#include "ps_server/shards/dense_shard.h"

namespace psrt {
namespace {

// The items of one push that update one shard.
struct ShardUpdate {
  const LocalVariable* variable = nullptr;
  int shard = 0;
  float learning_rate = 0;
  std::vector<DenseShard::Piece> dense;  // DENSE
  std::vector<int64_t> ids;              // embeddings, in payload order
  std::vector<PayloadView> grads;        // embeddings
  std::vector<float> merged;             // summed rows when ids repeat
};

// True if `ids` repeats an id. A bitmap over the shard's rows where that is
// cheap (array embeddings), a hash set otherwise.
bool HasDuplicates(const LocalVariable& v, int shard,
                   const std::vector<int64_t>& ids) {
  if (ids.size() < 2) return false;
  const VariableLayout& layout = *v.layout;
  const int64_t rows = layout.shards[shard].num_rows;
  if (layout.kind() == EMBEDDING &&
      rows <= 64 * static_cast<int64_t>(ids.size())) {
    std::vector<uint64_t> seen((rows + 63) / 64);
    for (int64_t id : ids) {
      const int64_t r = layout.LocalRow(shard, id);
      const uint64_t bit = uint64_t{1} << (r & 63);
      if (seen[r >> 6] & bit) return true;
      seen[r >> 6] |= bit;
    }
    return false;
  }
  absl::flat_hash_set<int64_t> seen;
  seen.reserve(ids.size());
  for (int64_t id : ids) {
    if (!seen.insert(id).second) return true;
  }
  return false;
}

// Sums the dense pieces (which may overlap: several workers' gradients for
// one synchronous step) into one contiguous piece, scaled.
void MergeDense(ShardUpdate* u, float scale) {
  int64_t lo = INT64_MAX, hi = 0;
  for (const DenseShard::Piece& p : u->dense) {
    lo = std::min(lo, p.offset);
    hi = std::max(hi, p.offset + p.count);
  }
  u->merged.assign(hi - lo, 0.0f);
  for (const DenseShard::Piece& p : u->dense) {
    float* out = u->merged.data() + (p.offset - lo);
    ForEachFloatRun(p.grad, [&](const float* g, size_t n, size_t first) {
      for (size_t i = 0; i < n; ++i) out[first + i] += g[i];
    });
  }
  for (float& x : u->merged) x *= scale;
  u->dense = {{lo, hi - lo,
               PayloadView::Contiguous(u->merged.data(),
                                       u->merged.size() * sizeof(float))}};
}

// Replaces repeated ids by one row holding the sum of their gradients.
void MergeDuplicates(ShardUpdate* u) {
  const int64_t width = u->variable->layout->row_width;
  absl::flat_hash_map<int64_t, size_t> position;
  std::vector<int64_t> unique;
  std::vector<size_t> slot_of(u->ids.size());
  for (size_t i = 0; i < u->ids.size(); ++i) {
    auto [it, inserted] = position.emplace(u->ids[i], unique.size());
    if (inserted) unique.push_back(u->ids[i]);
    slot_of[i] = it->second;
  }
  u->merged.assign(unique.size() * width, 0.0f);
  ForEachGradientRow(u->grads, width, [&](size_t i, const float* g) {
    float* sum = u->merged.data() + slot_of[i] * width;
    for (int64_t c = 0; c < width; ++c) sum[c] += g[c];
  });
  u->ids = std::move(unique);
  u->grads = {PayloadView::Contiguous(u->merged.data(),
                                      u->merged.size() * sizeof(float))};
}

}  // namespace

PushHandler::PushHandler(ShardStore* store, PushDedup* dedup,
                         size_t max_push_bytes)
    : store_(store), dedup_(dedup), max_push_bytes_(max_push_bytes) {}

absl::Status PushHandler::AddMessage(const grpc::ByteBuffer& message) {
  if (saw_last_) {
    return absl::InvalidArgumentError(
        "push stream continued after the message marked last");
  }
  bytes_ += message.Length();
  if (bytes_ > max_push_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "push exceeds the server's limit of ", max_push_bytes_,
        " bytes per call (--max_push_bytes); split it over several steps"));
  }
  auto frame = std::make_unique<FrameReader>();
  if (absl::Status s = frame->Parse(message); !s.ok()) return s;
  PushRequestHeader header;
  if (absl::Status s = frame->ParseHeader(&header); !s.ok()) return s;
  if (frames_.empty()) {
    first_header_ = header;
    first_header_.clear_items();
  }
  for (const TensorItem& item : header.items()) {
    ResolvedItem resolved;
    absl::Status s =
        ResolveItem(*store_, item, *frame, RequestKind::kPush, &resolved);
    if (!s.ok()) return s;
    rows_ += resolved.variable->is_dense()
                 ? 1
                 : static_cast<int64_t>(resolved.ids.size());
    items_.push_back(std::move(resolved));
  }
  frames_.push_back(std::move(frame));
  saw_last_ = header.last();
  return absl::OkStatus();
}

absl::StatusOr<PushResponse> PushHandler::Finish() {
  if (!saw_last_) {
    return absl::AbortedError(absl::StrCat(
        "push stream ended after ", frames_.size(),
        " message(s) without the one marked last (client cancelled or "
        "died?); nothing was applied"));
  }
  PushResponse response;
  const uint64_t client = first_header_.client_id();
  const uint64_t request = first_header_.request_id();
  if (request != 0) {
    switch (dedup_->Begin(client, request)) {
      case PushDedup::Outcome::kApplied:
        response.set_duplicate(true);
        return response;
      case PushDedup::Outcome::kInProgress:
        return absl::AbortedError(absl::StrCat(
            "push ", request, " of client ", client,
            " is still being applied; retry to learn its outcome"));
      case PushDedup::Outcome::kNew:
        break;
    }
  }
  const absl::Time start = absl::Now();
  absl::Status status = Apply(1.0f);
  apply_seconds_ = absl::ToDoubleSeconds(absl::Now() - start);
  if (request != 0) dedup_->Finish(client, request, status.ok());
  if (!status.ok()) return status;
  response.set_rows_applied(rows_);
  return response;
}

absl::Status PushHandler::ApplyMerged(float scale) { return Apply(scale); }

void PushHandler::Absorb(PushHandler* other) {
  for (auto& f : other->frames_) frames_.push_back(std::move(f));
  for (auto& item : other->items_) items_.push_back(std::move(item));
  bytes_ += other->bytes_;
  rows_ += other->rows_;
  other->frames_.clear();
  other->items_.clear();
}

// The shards' mutexes are a set known only at run time (taken in catalog
// order, released in reverse): beyond what the analysis can follow.
absl::Status PushHandler::Apply(float scale) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // Group by shard, keeping first-seen order so locks are taken in a
  // deterministic order per request.
  std::vector<ShardUpdate> updates;
  absl::flat_hash_map<std::pair<const LocalVariable*, int>, size_t> index;
  for (ResolvedItem& item : items_) {
    auto [it, inserted] = index.emplace(
        std::make_pair(item.variable, item.shard), updates.size());
    if (inserted) {
      updates.emplace_back();
      updates.back().variable = item.variable;
      updates.back().shard = item.shard;
      updates.back().learning_rate = item.learning_rate;
    }
    ShardUpdate& u = updates[it->second];
    if (item.variable->is_dense()) {
      u.dense.push_back({item.offset, item.count, item.grad});
    } else {
      u.ids.insert(u.ids.end(), item.ids.begin(), item.ids.end());
      u.grads.push_back(item.grad);
    }
  }
  for (ShardUpdate& u : updates) {
    if (u.variable->is_dense()) {
      if (scale != 1.0f) MergeDense(&u, scale);
    } else if (scale != 1.0f || HasDuplicates(*u.variable, u.shard, u.ids)) {
      MergeDuplicates(&u);
      for (float& x : u.merged) x *= scale;
    }
  }
  // Hash rows are created first: if one shard is full nothing is updated
  // (rows created meanwhile hold their initial values, which pulls of
  // absent ids return anyway).
  for (ShardUpdate& u : updates) {
    if (u.variable->is_dense()) continue;
    if (absl::Status s = u.variable->rows[u.shard]->EnsureRows(u.ids);
        !s.ok()) {
      return s;
    }
  }
  // Every shard of the push is locked (in catalog order, so two pushes
  // cannot deadlock) and the whole update is checked for results that are
  // not finite before the locks are released: all or nothing, and no pull
  // sees a part of a push that is refused. Dense shards are checked by a
  // dry run (sequential memory, cheap to read twice), then rows are updated
  // saving their old floats, and undone if one went non-finite; dense
  // shards are updated last.
  std::sort(updates.begin(), updates.end(),
            [](const ShardUpdate& a, const ShardUpdate& b) {
              return std::make_pair(a.variable->layout->index, a.shard) <
                     std::make_pair(b.variable->layout->index, b.shard);
            });
  std::vector<absl::Mutex*> locks;
  locks.reserve(updates.size());
  size_t undo_floats = 0;
  for (const ShardUpdate& u : updates) {
    if (u.variable->is_dense()) {
      locks.push_back(u.variable->dense[u.shard]->mutex());
    } else {
      locks.push_back(u.variable->rows[u.shard]->mutex());
      undo_floats += u.ids.size() * u.variable->rows[u.shard]->row_stride();
    }
  }
  PooledBuffer undo =
      BufferPool::Default().Acquire(undo_floats * sizeof(float));
  for (absl::Mutex* mu : locks) mu->Lock();
  absl::Status checked;
  const ShardUpdate* refused = nullptr;
  for (const ShardUpdate& u : updates) {
    if (!u.variable->is_dense()) continue;
    checked =
        u.variable->dense[u.shard]->CheckUpdateLocked(u.dense, u.learning_rate);
    if (!checked.ok()) {
      refused = &u;
      break;
    }
  }
  // Rows applied so far, with where their old floats went.
  std::vector<std::pair<const ShardUpdate*, float*>> applied_rows;
  float* next_undo = reinterpret_cast<float*>(undo.data());
  for (const ShardUpdate& u : updates) {
    if (!checked.ok()) break;
    if (u.variable->is_dense()) continue;
    RowShard& shard = *u.variable->rows[u.shard];
    checked = shard.ApplyLocked(u.ids, u.grads, u.learning_rate, next_undo);
    applied_rows.push_back({&u, next_undo});
    next_undo += u.ids.size() * shard.row_stride();
    if (!checked.ok()) refused = &u;
  }
  if (checked.ok()) {
    for (const ShardUpdate& u : updates) {
      if (u.variable->is_dense()) {
        u.variable->dense[u.shard]->ApplyLocked(u.dense, u.learning_rate);
      }
    }
  } else {
    for (auto& [u, saved] : applied_rows) {
      u->variable->rows[u->shard]->UndoLocked(u->ids, saved);
    }
    checked = absl::InvalidArgumentError(
        absl::StrCat("push to '", refused->variable->name(), "' shard ",
                     refused->shard, ": ", checked.message(),
                     "; the push was rejected and nothing was applied"));
    checked.SetPayload(kNonFiniteGradient, absl::Cord());
  }
  for (auto it = locks.rbegin(); it != locks.rend(); ++it) (*it)->Unlock();
  if (!checked.ok()) return checked;
  store_->ObserveStep(first_header_.step());
  return absl::OkStatus();
}

}  // namespace psrt

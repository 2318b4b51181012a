#include "ps_server/shards/hash_embedding_shard.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "partitioner/id_hash.h"
#include "util/finite.h"
#include "util/thread_pool.h"

namespace psrt {

HashEmbeddingShard::HashEmbeddingShard(const VariableLayout& layout, int shard,
                                       const Optimizer* optimizer,
                                       const Initializer& init, Reserve reserve,
                                       bool evict_at_memory_limit,
                                       std::unique_ptr<ColdTier> store)
    : layout_(layout),
      shard_(shard),
      optimizer_(optimizer),
      init_(init),
      width_(layout.row_width),
      stride_(layout.row_width * (1 + optimizer->num_slots())),
      capacity_(layout.shards[shard].num_rows),
      reserve_(std::move(reserve)),
      eviction_(layout.spec.eviction(), layout.num_shards(),
                evict_at_memory_limit),
      store_(std::move(store)),
      admission_policy_(AdmissionPolicy::For(layout.spec.admission())),
      table_(stride_, eviction_.tracks_steps()) {}

uint32_t HashEmbeddingShard::CreateRow(int64_t id, const float* spilled) {
  const uint32_t row = table_.Append(id, current_step_);
  float* values = table_.row(row);
  init_.FillRow(id, width_, values);
  for (int k = 0; k < optimizer_->num_slots(); ++k) {
    std::fill_n(values + width_ * (k + 1), width_,
                optimizer_->initial_slot_value(k));
  }
  if (spilled != nullptr) {
    std::memcpy(values, spilled, stride_ * sizeof(float));
    --spilled_;
    ++admission_.promoted_rows;
  }
  bounds_.CoverRow(values, width_, optimizer_->num_slots());
  return row;
}

ValueBounds HashEmbeddingShard::ExactBoundsLocked() const {
  ValueBounds bounds = ValueBounds::Empty();
  for (int64_t row = 0; row < table_.size(); ++row) {
    bounds.CoverRow(table_.row(static_cast<uint32_t>(row)), width_,
                    optimizer_->num_slots());
  }
  return bounds;
}

void HashEmbeddingShard::FindRows(absl::Span<const int64_t> ids,
                                  uint32_t* rows) const {
  // Lookups only read the index: ranges of a large request run on the
  // pool's threads under the caller's hold of mu_.
  table_.FindAll(ids, rows, kRowPrefetchDistance, kParallelRows);
}

absl::StatusOr<int64_t> HashEmbeddingShard::Gather(
    absl::Span<const int64_t> ids, float* out) const {
  // Two passes, each with its memory prefetched ahead: the ids' index
  // slots, then their rows (both random reads of tables larger than the
  // caches).
  std::vector<uint32_t> rows(ids.size());
  {
    absl::ReaderMutexLock lock(&mu_);
    FindRows(ids, rows.data());
    const bool all_in_memory =
        store_ == nullptr || spilled_ == 0 ||
        std::find(rows.begin(), rows.end(), kNoRow) == rows.end();
    if (all_in_memory || pins_.load() > 0) {
      if (absl::Status s = CopyRowsLocked(ids, rows.data(),
                                          /*read_store=*/!all_in_memory, out);
          !s.ok()) {
        return s;
      }
      return version_;
    }
  }
  // Ids missing from memory while rows are spilled: the spilled ones come
  // back to memory (promoted on access), under the exclusive lock. Which
  // tier holds a row is not what the shard holds (values, version): the
  // pull still changes nothing a reader can see.
  absl::MutexLock lock(&mu_);
  FindRows(ids, rows.data());
  const bool promoted =
      const_cast<HashEmbeddingShard*>(this)->PromoteForPullLocked(ids,
                                                                  rows.data());
  if (absl::Status s =
          CopyRowsLocked(ids, rows.data(), /*read_store=*/!promoted, out);
      !s.ok()) {
    return s;
  }
  return version_;
}

bool HashEmbeddingShard::PromoteForPullLocked(absl::Span<const int64_t> ids,
                                              uint32_t* rows) {
  if (store_ == nullptr || spilled_ == 0 || pins_.load() > 0) return false;
  if (std::find(rows, rows + ids.size(), kNoRow) == rows + ids.size()) {
    return true;
  }
  // Which missing ids the tier holds (its index only), room for them,
  // then the rows taken: a pull takes no row that memory cannot hold.
  TakenRows taken;
  CollectMissing(ids, rows, &taken);
  taken.rows.resize(taken.ids.size() * stride_);
  const std::vector<int64_t>& missing = taken.ids;
  if (absl::Status s =
          store_->Read(missing, /*floats=*/0, nullptr, taken.found.get());
      !s.ok()) {
    return false;
  }
  const int64_t found =
      std::count(taken.found.get(), taken.found.get() + missing.size(), true);
  if (found == 0) return true;  // never seen (or evicted without a tier)
  const uint64_t epoch = rows_epoch_;
  if (absl::Status s = MakeRoomLocked(found, "promoted", /*allocate=*/false,
                                      absl::MakeConstSpan(rows, ids.size()));
      !s.ok()) {
    // No room in memory (a row or memory limit without eviction, or a
    // disk that cannot take the rows to evict): this pull reads the rows
    // where they are.
    VLOG(1) << "hash embedding '" << layout_.spec.name() << "' shard " << shard_
            << ": " << found << " spilled rows stay on disk: " << s;
    return false;
  }
  if (absl::Status s =
          store_->TakeMany(missing, taken.rows.data(), taken.found.get());
      !s.ok()) {
    LOG(ERROR) << "hash embedding '" << layout_.spec.name() << "' shard "
               << shard_ << ": a pull reads its spilled rows instead of "
               << "promoting them: " << s;
    return false;  // nothing taken
  }
  if (rows_epoch_ != epoch) FindRows(ids, rows);  // room made moved rows
  table_.ReserveIndex(table_.size() + found);
  for (size_t k = 0; k < missing.size(); ++k) {
    if (taken.found[k]) CreateRow(missing[k], taken.row(k, stride_));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (rows[i] != kNoRow) continue;
    rows[i] = table_.Find(ids[i]);
  }
  return true;
}

void HashEmbeddingShard::CollectMissing(absl::Span<const int64_t> ids,
                                        const uint32_t* rows,
                                        TakenRows* taken) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (rows[i] == kNoRow) taken->ids.push_back(ids[i]);
  }
  // In the store's order, once each (a request may repeat an id).
  std::sort(taken->ids.begin(), taken->ids.end());
  taken->ids.erase(std::unique(taken->ids.begin(), taken->ids.end()),
                   taken->ids.end());
  taken->found.reset(new bool[taken->ids.size()]());
}

absl::Status HashEmbeddingShard::CopyRowsLocked(absl::Span<const int64_t> ids,
                                                const uint32_t* rows,
                                                bool read_store,
                                                float* out) const {
  // Spilled rows are read from the SSD tier, all in one batch.
  std::vector<int32_t> on_disk;  // per id: its row in from_disk, or -1
  std::vector<float> from_disk;
  if (read_store && store_ != nullptr && spilled_ > 0) {
    std::vector<int64_t> missing;
    on_disk.assign(ids.size(), -1);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (rows[i] == kNoRow) {
        on_disk[i] = static_cast<int32_t>(missing.size());
        missing.push_back(ids[i]);
      }
    }
    from_disk.resize(missing.size() * width_);
    std::unique_ptr<bool[]> found(new bool[missing.size()]());
    if (absl::Status s =
            store_->Read(missing, width_, from_disk.data(), found.get());
        !s.ok()) {
      // Initial values in their place would train on as if those rows
      // were new: the pull fails instead, and the rows stay on disk.
      return UnreadableRowsError(static_cast<int64_t>(missing.size()), "pull",
                                 s);
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      if (on_disk[i] >= 0 && !found[on_disk[i]]) on_disk[i] = -1;
    }
  }
  auto copy = [&](int64_t begin, int64_t end) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    for (int64_t i = begin; i < end; ++i) {
      if (i + static_cast<int64_t>(kRowPrefetchDistance) < end &&
          rows[i + kRowPrefetchDistance] != kNoRow) {
        PrefetchRow(table_.row(rows[i + kRowPrefetchDistance]), width_,
                    /*write=*/false);
      }
      if (rows[i] == kNoRow && !on_disk.empty() && on_disk[i] >= 0) {
        std::memcpy(out + i * width_, &from_disk[on_disk[i] * width_],
                    width_ * sizeof(float));
      } else if (rows[i] == kNoRow) {
        if (admission_policy_ != nullptr &&
            admission_policy_->zeros_for_unadmitted()) {
          std::fill_n(out + i * width_, width_, 0.0f);
        } else {
          init_.FillRow(ids[i], width_, out + i * width_);
        }
      } else {
        std::memcpy(out + i * width_, table_.row(rows[i]),
                    width_ * sizeof(float));
      }
    }
  };
  PoolParallelFor(static_cast<int64_t>(ids.size()), kParallelRows, copy);
  return absl::OkStatus();
}

absl::Status HashEmbeddingShard::UnreadableRowsError(
    int64_t count, absl::string_view what, const absl::Status& read) const {
  return absl::Status(
      read.code(),
      absl::StrCat("hash embedding '", layout_.spec.name(), "' shard ", shard_,
                   ": the SSD tier could not read back the rows of this ", what,
                   "'s ", count, " ids missing from memory (", read.message(),
                   "); they stay on disk and the ", what, " was refused",
                   what == "pull" ? "" : ", nothing applied"));
}

int64_t HashEmbeddingShard::RowLimit() const {
  int64_t limit = std::numeric_limits<uint32_t>::max();
  if (capacity_ > 0) limit = std::min(limit, capacity_);
  return limit;
}

absl::Status HashEmbeddingShard::EnsureRows(
    absl::Span<const int64_t> ids, std::vector<uint32_t>* rows_out,
    uint64_t* rows_epoch, const absl::flat_hash_set<int64_t>* primary_dropped) {
  std::vector<uint32_t> local;
  std::vector<uint32_t>& rows = rows_out != nullptr ? *rows_out : local;
  rows.resize(ids.size());
  absl::MutexLock lock(&mu_);
  FindRows(ids, rows.data());
  absl::Status s = primary_dropped != nullptr
                       ? FollowPrimaryLocked(ids, rows.data(), *primary_dropped)
                       : GiveRowsLocked(ids, rows.data(), Admit::kByPolicy,
                                        /*place_what_fits=*/true, rows);
  if (rows_epoch != nullptr) *rows_epoch = rows_epoch_;
  if (rows_out == nullptr) rows.clear();
  return s;
}

absl::Status HashEmbeddingShard::FollowPrimaryLocked(
    absl::Span<const int64_t> ids, uint32_t* rows,
    const absl::flat_hash_set<int64_t>& primary_dropped) {
  // The missing ids the primary gave rows, each once. An id the primary
  // dropped gets no row even where it has one here: the primary decided
  // when it prepared this push, and a push prepared after it but applied
  // (so forwarded) before it may have created the row since.
  std::vector<int64_t> given;
  absl::flat_hash_set<int64_t> seen;
  for (size_t i = 0; i < ids.size(); ++i) {
    const bool dropped = primary_dropped.contains(ids[i]);
    if (dropped) rows[i] = kNoRow;
    if (rows[i] != kNoRow || !seen.insert(ids[i]).second) continue;
    // Counted as the primary counted them (it sighted every id it lacked),
    // so that this copy's admission decides much as the primary's would if
    // it takes the shard over.
    if (admission_policy_ != nullptr) admission_policy_->Sight(ids[i]);
    if (!dropped) given.push_back(ids[i]);
  }
  if (given.empty()) return absl::OkStatus();
  std::vector<uint32_t> given_rows(given.size(), kNoRow);
  const int64_t promoted_before = admission_.promoted_rows;
  const uint64_t epoch_before = rows_epoch_;
  follows_primary_ = true;
  absl::Status given_status = GiveRowsLocked(
      given, given_rows.data(), Admit::kAll,
      /*place_what_fits=*/false, absl::MakeConstSpan(rows, ids.size()));
  follows_primary_ = false;
  if (!given_status.ok()) return given_status;
  CountAdmittedLocked(static_cast<int64_t>(given.size()), promoted_before);
  // Making room (an SSD tier at the budget) may have moved the rows found
  // before: every row found again.
  const bool moved = rows_epoch_ != epoch_before;
  for (size_t i = 0; i < ids.size(); ++i) {
    if ((rows[i] == kNoRow || moved) && !primary_dropped.contains(ids[i])) {
      rows[i] = table_.Find(ids[i]);
    }
  }
  return absl::OkStatus();
}

void HashEmbeddingShard::CountAdmittedLocked(int64_t given,
                                             int64_t promoted_before) {
  if (admission_policy_ == nullptr) return;
  admission_.admitted_rows +=
      given - (admission_.promoted_rows - promoted_before);
}

absl::Status HashEmbeddingShard::GiveRowsLocked(
    absl::Span<const int64_t> ids, uint32_t* rows, Admit admit,
    bool place_what_fits, absl::Span<const uint32_t> keep) {
  AdmissionPolicy* policy =
      admit == Admit::kByPolicy ? admission_policy_.get() : nullptr;
  if (store_ != nullptr && spilled_ > 0) {
    return GiveRowsWithTierLocked(ids, rows, policy, place_what_fits, keep);
  }
  // Nothing on disk: the ids in push order, a repeat finding the row its
  // first occurrence got (no sort: pushes rarely repeat an id, clients
  // de-duplicate them).
  int64_t candidates = 0;  // a repeat counted twice: the safe side
  size_t missing = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (rows[i] != kNoRow) continue;
    ++missing;
    candidates += policy == nullptr || policy->MayAdmitNext(ids[i]);
  }
  if (missing == 0) return absl::OkStatus();
  absl::StatusOr<int64_t> room = RoomForLocked(
      candidates, policy != nullptr, /*allocate=*/policy != nullptr,
      place_what_fits, keep, ids, rows);
  if (!room.ok()) return room.status();
  if (policy == nullptr) table_.ReserveIndex(table_.size() + *room);
  // This push's ids sighted and not admitted: a push is one sighting.
  absl::flat_hash_set<int64_t> not_admitted;
  if (policy != nullptr) not_admitted.reserve(missing - candidates);
  int64_t placed = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (rows[i] != kNoRow) continue;
    const int64_t id = ids[i];
    rows[i] = table_.Find(id);  // an earlier repeat's
    if (rows[i] != kNoRow) continue;
    if (policy != nullptr) {
      if (not_admitted.contains(id)) continue;
      if (!policy->Sight(id)) {
        not_admitted.insert(id);
        continue;
      }
    }
    if (placed == *room) continue;
    rows[i] = CreateRow(id);
    ++placed;
    if (policy != nullptr) ++admission_.admitted_rows;
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> HashEmbeddingShard::RoomForLocked(
    int64_t candidates, bool admitting, bool allocate, bool place_what_fits,
    absl::Span<const uint32_t> keep, absl::Span<const int64_t> ids,
    uint32_t* rows) {
  if (candidates == 0) return 0;
  const uint64_t epoch = rows_epoch_;
  bool pinned_full = false;
  int64_t room = candidates;
  if (absl::Status s =
          MakeRoomLocked(candidates, admitting ? "this push may admit" : "new",
                         allocate, keep, &pinned_full);
      !s.ok()) {
    if (!pinned_full || !place_what_fits) return s;
    room = std::max<int64_t>(
        0, std::min(table_.room(), RowLimit()) - table_.size());
    LOG_EVERY_N(WARNING, 100)
        << "hash embedding '" << layout_.spec.name() << "' shard " << shard_
        << " is at --memory_budget_mb while a checkpoint reads it (no row "
        << "is evicted until it ends): " << candidates - room
        << " ids of a push get no row yet; their gradients are dropped and "
        << "counted as unadmitted";
  }
  // Making room moved rows: the ids found are found again (the missing
  // stay missing: eviction adds none).
  if (rows_epoch_ != epoch) FindRows(ids, rows);
  return room;
}

absl::Status HashEmbeddingShard::GiveRowsWithTierLocked(
    absl::Span<const int64_t> ids, uint32_t* rows, AdmissionPolicy* policy,
    bool place_what_fits, absl::Span<const uint32_t> keep) {
  TakenRows missing;  // the ids without a row, sorted, once each
  CollectMissing(ids, rows, &missing);
  const size_t n = missing.ids.size();
  if (n == 0) return absl::OkStatus();
  // Which of them the SSD tier holds (its index only): those were
  // admitted before, and come back with their values and slots.
  bool* on_disk = missing.found.get();
  if (absl::Status s = store_->Read(missing.ids, 0, nullptr, on_disk);
      !s.ok()) {
    return UnreadableRowsError(static_cast<int64_t>(n), "update", s);
  }
  // Room first, for every id that may get a row: nothing is taken,
  // created or counted for a push that is refused for room.
  std::vector<bool> may_get(n);
  int64_t candidates = 0;
  for (size_t k = 0; k < n; ++k) {
    may_get[k] =
        on_disk[k] || policy == nullptr || policy->MayAdmitNext(missing.ids[k]);
    candidates += may_get[k];
  }
  absl::StatusOr<int64_t> room =
      RoomForLocked(candidates, policy != nullptr, /*allocate=*/true,
                    place_what_fits, keep, ids, rows);
  if (!room.ok()) return room.status();
  // Those that get a row: within the room, in id order.
  std::vector<bool> gets(n);
  int64_t placed = 0;
  for (size_t k = 0; k < n; ++k) {
    gets[k] = may_get[k] && placed < *room;
    placed += gets[k];
  }
  // The tier's rows, taken in one batch; a failure takes none.
  TakenRows taken;
  for (size_t k = 0; k < n; ++k) {
    if (gets[k] && on_disk[k]) taken.ids.push_back(missing.ids[k]);
  }
  if (!taken.ids.empty()) {
    taken.rows.resize(taken.ids.size() * stride_);
    taken.found.reset(new bool[taken.ids.size()]());
    if (absl::Status s =
            store_->TakeMany(taken.ids, taken.rows.data(), taken.found.get());
        !s.ok()) {
      // The rows stay on disk rather than start again from their initial
      // values (and be in both tiers).
      return UnreadableRowsError(static_cast<int64_t>(taken.ids.size()),
                                 "update", s);
    }
  }
  // Admission decides here, one sighting per id however often the push
  // repeats it; then the rows.
  table_.ReserveIndex(table_.size() + placed);
  size_t next_taken = 0;
  for (size_t k = 0; k < n; ++k) {
    const int64_t id = missing.ids[k];
    if (on_disk[k]) {
      if (gets[k]) {
        const size_t t = next_taken++;
        CreateRow(id, taken.found[t] ? taken.row(t, stride_) : nullptr);
      }
      continue;
    }
    const bool admitted = policy == nullptr || policy->Sight(id);
    if (!admitted || !gets[k]) continue;
    CreateRow(id);
    if (policy != nullptr) ++admission_.admitted_rows;
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (rows[i] == kNoRow) rows[i] = table_.Find(ids[i]);
  }
  return absl::OkStatus();
}

absl::Status HashEmbeddingShard::RefreshRowsLocked(ShardUpdate* update) {
  if (update->rows.size() != update->ids.size() ||
      update->rows_epoch == rows_epoch_) {
    return absl::OkStatus();
  }
  // Rows moved since Prepare (an eviction): found again. An id whose row
  // was evicted since gets it back as Prepare gave it (from the SSD tier,
  // or initialized if dropped); an id Prepare gave no row stays without
  // one, as decided then.
  std::vector<uint32_t> rows(update->ids.size());
  FindRows(update->ids, rows.data());
  std::vector<int64_t> lost;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (update->rows[i] == kNoRow) {
      rows[i] = kNoRow;
    } else if (rows[i] == kNoRow) {
      lost.push_back(update->ids[i]);
    }
  }
  if (!lost.empty()) {
    std::vector<uint32_t> lost_rows(lost.size(), kNoRow);
    if (absl::Status s = GiveRowsLocked(lost, lost_rows.data(), Admit::kAll,
                                        /*place_what_fits=*/false, rows);
        !s.ok()) {
      return s;
    }
    admission_.given_back_rows += static_cast<int64_t>(lost.size());
    // (Making room for them may have moved the others again.)
    for (size_t i = 0; i < rows.size(); ++i) {
      if (update->rows[i] != kNoRow) rows[i] = table_.Find(update->ids[i]);
    }
  }
  update->rows = std::move(rows);
  update->rows_epoch = rows_epoch_;
  return absl::OkStatus();
}

absl::Status HashEmbeddingShard::MakeRoomLocked(int64_t count,
                                                absl::string_view what,
                                                bool allocate,
                                                absl::Span<const uint32_t> keep,
                                                bool* pinned_full) {
  // max_rows: the least recently updated rows make room first. (While a
  // checkpoint reads the rows nothing is evicted: the shard may pass its
  // share until the next sweep.)
  const int64_t max_rows = eviction_.max_rows();
  if (max_rows > 0 && table_.size() + count > max_rows && pins_.load() == 0 &&
      !follows_primary_) {
    if (count > max_rows) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "hash embedding '", layout_.spec.name(), "' shard ", shard_,
          ": a push brings ", count, " ", what,
          " ids, more than the shard's share of eviction.max_rows (", max_rows,
          " rows: ", layout_.spec.eviction().max_rows(), " over ",
          layout_.num_shards(),
          " shards); push fewer ids at once or raise max_rows"));
    }
    // Room for the push plus 1% of the share, so that pushes on a full
    // shard do not each pay for a search.
    if (absl::Status s = EvictLeastRecentLocked(
            EvictionPolicy::RoomFor(table_.size(), count, max_rows), keep);
        !s.ok()) {
      return NoRoomForSpillError(count, what, s);
    }
    if (table_.size() + count > max_rows) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "hash embedding '", layout_.spec.name(), "' shard ", shard_,
          " is full: its ", table_.size(), " rows (eviction.max_rows share ",
          max_rows, ") are all carried by this push, which brings ", count, " ",
          what, " ids; push fewer ids at once or raise max_rows"));
    }
  }
  const int64_t limit = RowLimit();
  if (table_.size() + count > limit) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "hash embedding '", layout_.spec.name(), "' shard ", shard_,
        " is full: ", table_.size(), " rows + ", count, " ", what,
        " would pass its capacity of ", limit,
        " rows (shape[0] = ", layout_.rows, " over ", layout_.num_shards(),
        " shards); raise shape[0] or the shard count",
        admission_policy_ != nullptr ? " (or admission.min_count)" : ""));
  }
  const int64_t new_blocks =
      (table_.size() + count + kRowsPerBlock - 1) / kRowsPerBlock -
      table_.num_blocks();
  if (new_blocks <= 0) return absl::OkStatus();
  if (reserve_) {
    if (absl::Status s = reserve_(new_blocks * block_bytes()); !s.ok()) {
      // At the PS's memory budget: the rows the shard's blocks hold are
      // all it gets; the least recently updated make room.
      const int64_t held = table_.num_blocks() * kRowsPerBlock;
      const bool may_evict = !follows_primary_ || store_ != nullptr;
      if (eviction_.at_memory_limit() && pins_.load() == 0 && count <= held &&
          may_evict) {
        if (absl::Status s = EvictLeastRecentLocked(
                EvictionPolicy::RoomFor(table_.size(), count, held), keep);
            !s.ok()) {
          return NoRoomForSpillError(count, what, s);
        }
        if (table_.size() + count <= held) return absl::OkStatus();
      }
      if (pinned_full != nullptr) {
        *pinned_full = eviction_.at_memory_limit() && pins_.load() > 0;
      }
      return absl::ResourceExhaustedError(absl::StrCat(
          "hash embedding '", layout_.spec.name(), "' shard ", shard_,
          " cannot grow by ", count, " rows (", table_.size(), " held",
          !eviction_.at_memory_limit() ? ""
          : may_evict
              ? absl::StrCat(", in blocks of room for ", held,
                             " -- all it may use at --memory_budget_mb, and "
                             "eviction found no room in them: the push "
                             "carries them, or a checkpoint is reading them")
              : absl::StrCat(", in blocks of room for ", held,
                             " -- all it may use at --memory_budget_mb; a "
                             "backup copy without an SSD tier evicts only "
                             "the rows its primary evicted: give this PS a "
                             "larger budget than its primary, or the "
                             "variable an SSD tier"),
          "): ", s.message()));
    }
  }
  for (int64_t b = 0; allocate && b < new_blocks; ++b) {
    table_.AddBlock();
  }
  return absl::OkStatus();
}

int64_t HashEmbeddingShard::SampleStepLocked(double fraction) {
  const int64_t cutoff = EvictionPolicy::CutoffStep(
      table_.last_steps(), current_step_, fraction, sample_state_);
  sample_state_ += EvictionPolicy::kSample;
  return cutoff;
}

absl::Status HashEmbeddingShard::NoRoomForSpillError(
    int64_t count, absl::string_view what, const absl::Status& spill) const {
  return absl::ResourceExhaustedError(absl::StrCat(
      "hash embedding '", layout_.spec.name(), "' shard ", shard_,
      ": no room for ", count, " ", what,
      " ids: the rows to evict for them could not be written to the SSD "
      "tier (",
      spill.message(), "); they stay in memory and nothing was applied"));
}

absl::Status HashEmbeddingShard::EvictLeastRecentLocked(
    int64_t need, absl::Span<const uint32_t> keep) {
  need = std::min(need, table_.size());
  if (need <= 0) return absl::OkStatus();
  // The rows the push carries, a bit per row (moved with a row that an
  // eviction moves).
  std::vector<uint64_t> kept(table_.size() / 64 + 1, 0);
  auto is_kept = [&](int64_t row) {
    return (kept[row >> 6] >> (row & 63)) & 1;
  };
  for (uint32_t row : keep) {
    if (row != kNoRow) kept[row >> 6] |= uint64_t{1} << (row & 63);
  }
  // Rows updated at or before the cutoff step, twice as many as needed
  // by the sample, from where the last search stopped; then, if too few
  // were found, any row this push does not carry.
  int64_t cutoff = SampleStepLocked(
      std::min(1.0, 2.0 * static_cast<double>(need) / table_.size()));
  int64_t evicted = 0;
  int64_t pos = evict_hand_ % table_.size();
  for (int pass = 0; pass < 2 && evicted < need; ++pass) {
    if (pass == 1) cutoff = std::numeric_limits<int64_t>::max();
    // A pass ends after table_.size() looks at rows it kept (a full turn).
    for (int64_t kept_looks = 0;
         kept_looks < table_.size() && evicted < need;) {
      const int64_t step =
          table_.last_step(pos) < 0 ? current_step_ : table_.last_step(pos);
      if (step <= cutoff && !is_kept(pos)) {
        const int64_t last = table_.size() - 1;
        if (is_kept(last)) kept[pos >> 6] |= uint64_t{1} << (pos & 63);
        EvictRowLocked(pos);  // the last row moves here: look again
        ++evicted;
        if (table_.size() == 0) break;
        if (pos >= table_.size()) pos = 0;
      } else {
        pos = (pos + 1) % table_.size();
        ++kept_looks;
      }
    }
  }
  evict_hand_ = table_.size() > 0 ? pos : 0;
  if (evicted > 0) ++rows_epoch_;
  return CommitSpilledLocked();
}

bool HashEmbeddingShard::HasRepeatedIds(const ShardUpdate& update) const {
  const std::vector<uint32_t>& rows = update.rows;
  if (rows.size() != update.ids.size()) return RowShard::HasRepeatedIds(update);
  if (rows.size() < 2) return false;
  // Rows are dense indices: a bitmap over the highest one (at most 64 bits
  // per row of the update, else the hash set).
  const uint32_t top = *std::max_element(rows.begin(), rows.end());
  if (top / 64 > rows.size()) return RowShard::HasRepeatedIds(update);
  std::vector<uint64_t> seen(top / 64 + 1);
  for (uint32_t r : rows) {
    const uint64_t bit = uint64_t{1} << (r & 63);
    if (seen[r >> 6] & bit) return true;
    seen[r >> 6] |= bit;
  }
  return false;
}

absl::Status HashEmbeddingShard::ApplyUpdateLocked(const ShardUpdate& update,
                                                   float* undo) {
  current_step_ = std::max(current_step_, update.global_step);
  if (update.rows.size() != update.ids.size()) {
    return ApplyRowsLocked(update.ids, update.grads, update.learning_rate,
                           undo);
  }
  // CheckLocked brought the rows up to date under this hold of the lock.
  DCHECK_EQ(update.rows_epoch, rows_epoch_);
  return ApplyToRowsLocked(update.ids, update.rows, update.grads,
                           update.learning_rate, undo);
}

absl::Status HashEmbeddingShard::ApplyRowsLocked(
    absl::Span<const int64_t> ids, absl::Span<const PayloadView> grads,
    float learning_rate, float* undo) {
  // The rows first (index slots prefetched ahead), so that the update loop
  // can prefetch rows ahead. An id without a row (not ensured) is dropped.
  std::vector<uint32_t> rows(ids.size());
  FindRows(ids, rows.data());
  return ApplyToRowsLocked(ids, rows, grads, learning_rate, undo);
}

absl::Status HashEmbeddingShard::ApplyToRowsLocked(
    absl::Span<const int64_t> ids, absl::Span<const uint32_t> rows,
    absl::Span<const PayloadView> grads, float learning_rate, float* undo) {
  // Ids without a row (not admitted, or no room for them): their
  // gradients are dropped, counted.
  admission_.unadmitted_gradients +=
      std::count(rows.begin(), rows.end(), kNoRow);
  const UpdateContext context =
      MakeUpdateContext(*optimizer_, learning_rate, version_ + 1);
  // Both run inside this hold of mu_ (here or on a pool thread).
  auto row_of = [&](size_t i) ABSL_NO_THREAD_SAFETY_ANALYSIS -> float* {
    return rows[i] == kNoRow ? nullptr : table_.row(rows[i]);
  };
  auto updated = [&](size_t i) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (eviction_.tracks_steps()) table_.last_step(rows[i]) = current_step_;
  };
  absl::Status applied =
      UpdateRowsLocked(ids, grads, context, undo, row_of, updated);
  ++version_;
  return applied;
}

void HashEmbeddingShard::UndoRowsLocked(absl::Span<const int64_t> ids,
                                        const float* undo) {
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t row = table_.Find(ids[i]);
    if (row == kNoRow) continue;  // not admitted: never changed
    std::memcpy(table_.row(row), undo + i * stride_, stride_ * sizeof(float));
  }
  --version_;
}

int64_t HashEmbeddingShard::ExportRows(int64_t first, int64_t count,
                                       int64_t* ids, float* out,
                                       int64_t* version) const {
  absl::ReaderMutexLock lock(&mu_);
  return ExportRowsLocked(first, count, ids, out, version);
}

int64_t HashEmbeddingShard::ExportedFromDiskLocked() const {
  if (store_ == nullptr) return 0;
  return pins_.load() > 0 ? pinned_spilled_.load() : spilled_;
}

int64_t HashEmbeddingShard::ExportRowsLocked(int64_t first, int64_t count,
                                             int64_t* ids, float* out,
                                             int64_t* version) const {
  *version = version_;
  // The SSD tier's rows first, then memory's.
  const int64_t on_disk = ExportedFromDiskLocked();
  int64_t from_disk = 0;
  if (first < on_disk) {
    const int64_t want = std::min(count, on_disk - first);
    from_disk = store_->Export(first, want, ids, out);
    if (from_disk < want) return from_disk;  // the store ended early
    if (ids != nullptr) ids += from_disk;
    if (out != nullptr) out += from_disk * stride_;
    count -= from_disk;
  }
  first = std::max<int64_t>(0, first - on_disk);
  count = std::max<int64_t>(0, std::min(count, table_.size() - first));
  for (int64_t i = 0; i < count; ++i) {
    const uint32_t row = static_cast<uint32_t>(first + i);
    if (out != nullptr) {
      std::memcpy(out + i * stride_, table_.row(row), stride_ * sizeof(float));
    }
    if (ids != nullptr) ids[i] = table_.id(row);
  }
  return from_disk + count;
}

absl::Status HashEmbeddingShard::ImportRows(absl::Span<const int64_t> ids,
                                            const float* rows) {
  // With max_rows, in pieces of at most half the share: each makes room
  // for itself (a checkpoint of an SSD-tier table holds more rows than the
  // share; the rows imported first go to disk as later ones come in).
  const size_t piece =
      eviction_.max_rows() > 0
          ? static_cast<size_t>(std::max<int64_t>(1, eviction_.max_rows() / 2))
          : ids.size();
  while (ids.size() > piece) {
    if (absl::Status s = ImportRows(ids.subspan(0, piece), rows); !s.ok()) {
      return s;
    }
    ids.remove_prefix(piece);
    rows += piece * stride_;
  }
  // Rows a checkpoint or a primary holds were admitted there.
  std::vector<uint32_t> found(ids.size());
  absl::MutexLock lock(&mu_);
  FindRows(ids, found.data());
  if (absl::Status s = GiveRowsLocked(ids, found.data(), Admit::kAll,
                                      /*place_what_fits=*/false, found);
      !s.ok()) {
    return s;
  }
  bounds_.Invalidate();
  for (size_t i = 0; i < ids.size(); ++i) {
    std::memcpy(table_.row(found[i]), rows + i * stride_,
                stride_ * sizeof(float));
    // Eviction's clock starts at the next sweep (this shard does not know
    // the step it is restored at).
    if (eviction_.tracks_steps()) table_.last_step(found[i]) = -1;
  }
  return absl::OkStatus();
}

absl::Status HashEmbeddingShard::ImportColdRows(absl::Span<const int64_t> ids,
                                                const float* rows) {
  if (store_ == nullptr) return ImportRows(ids, rows);
  // (The tier's index is reserved from the budget by the next sweep, as
  // after the spills of pushes.)
  absl::MutexLock lock(&mu_);
  AwaitUnpinnedLocked();
  bool moved = false;
  for (size_t i = 0; i < ids.size(); ++i) {
    // A row in memory (a retried import) goes to disk with the new values.
    const uint32_t row = table_.Find(ids[i]);
    if (row != kNoRow) {
      table_.Remove(row);
      moved = true;
    }
    store_->Spill(ids[i], rows + i * stride_);
  }
  if (moved) ++rows_epoch_;
  bounds_.Invalidate();
  // An id on disk already is replaced there: the tier's row count says
  // how many are new. Rows the tier cannot write come back to memory
  // (CreateRow counts each as taken from the tier).
  const int64_t staged = store_->staged_rows();
  const int64_t on_disk_before = store_->rows();
  spilled_ += staged;
  absl::Status s = store_->Commit([this](int64_t id, const float* row) {
    mu_.AssertHeld();  // Commit calls back on this thread, under mu_
    CreateRow(id, row);
  });
  if (s.ok()) {
    spilled_ += (store_->rows() - on_disk_before) - staged;
  } else {
    admission_.promoted_rows -= staged;
  }
  return s;
}

absl::Status HashEmbeddingShard::ImportAdmissionSketch(
    absl::Span<const uint8_t> counters, int64_t increments) {
  absl::MutexLock lock(&mu_);
  if (admission_policy_ == nullptr) {
    return Shard::ImportAdmissionSketch(counters, increments);
  }
  return admission_policy_->mutable_sketch()->Assign(counters, increments);
}

absl::Status HashEmbeddingShard::TakeFirstBlock() {
  absl::MutexLock lock(&mu_);
  if (table_.num_blocks() > 0) return absl::OkStatus();
  if (reserve_) {
    if (absl::Status s = reserve_(block_bytes()); !s.ok()) return s;
  }
  table_.AddBlock();
  return absl::OkStatus();
}

void HashEmbeddingShard::EvictRowLocked(int64_t row) {
  if (eviction_listener_) evicted_ids_.push_back(table_.id(row));
  if (store_ != nullptr) {
    store_->Spill(table_.id(row), table_.row(static_cast<uint32_t>(row)));
    ++spilled_;
  }
  table_.Remove(row);
  ++admission_.evicted_rows;
}

void HashEmbeddingShard::AwaitUnpinnedLocked() {
  // An export pinned the rows' order (a checkpoint, psctl replicas'
  // digest): it ends soon.
  while (pins_.load() > 0) {
    mu_.Unlock();
    absl::SleepFor(absl::Milliseconds(1));
    mu_.Lock();
  }
}

absl::Status HashEmbeddingShard::FollowEvictions(
    absl::Span<const int64_t> ids) {
  absl::Status spilled;
  {
    absl::MutexLock lock(&mu_);
    AwaitUnpinnedLocked();
    bool moved = false;
    for (int64_t id : ids) {
      const uint32_t row = table_.Find(id);
      if (row == kNoRow) continue;  // spilled here already (SSD tier)
      EvictRowLocked(row);
      moved = true;
    }
    if (moved) ++rows_epoch_;
    spilled = CommitSpilledLocked();
  }
  if (!spilled.ok()) {
    // The rows stay in memory with their values: with an SSD tier (the
    // only way a spill can fail) this copy still holds what the primary
    // holds, in another tier.
    LOG_EVERY_N(WARNING, 100)
        << "hash embedding '" << layout_.spec.name() << "' shard " << shard_
        << ": rows its primary evicted stay in memory on this backup: "
        << spilled;
  }
  ReserveTierIndex();
  return absl::OkStatus();
}

int64_t HashEmbeddingShard::EvictIdleRows(int64_t global_step) {
  if (!eviction_.tracks_steps()) return 0;
  absl::MutexLock sweep(&sweep_mu_);
  const int64_t older_than = eviction_.IdleBefore(global_step);
  // max_rows: rows above 90% of the share go, the least recently updated
  // (at or before a cutoff step sampled from the rows' last steps).
  int64_t over = 0;
  int64_t cutoff = std::numeric_limits<int64_t>::min();
  if (eviction_.max_rows() > 0) {
    absl::MutexLock lock(&mu_);
    over = eviction_.SweepExcess(table_.size());
    if (over > 0) {
      cutoff = SampleStepLocked(static_cast<double>(over) /
                                static_cast<double>(table_.size()));
    }
  }
  int64_t evicted = 0;
  // From the top row down, kEvictionRowsPerHold rows per hold of the lock:
  // a hole takes the last row, which the sweep has looked at already, and
  // rows created between holds are new.
  int64_t next = -1;
  for (bool first = true;; first = false) {
    {
      absl::MutexLock lock(&mu_);
      if (pins_.load() > 0) break;  // a checkpoint reads rows by position
      if (first) next = table_.size() - 1;
      next = std::min(next, table_.size() - 1);
      const int64_t stop = std::max<int64_t>(-1, next - kEvictionRowsPerHold);
      bool moved = false;
      for (; next > stop; --next) {
        int64_t& last = table_.last_step(next);
        if (last < 0) {
          last = global_step;  // restored: idle from now on
        } else if (last < older_than || (over > 0 && last <= cutoff)) {
          EvictRowLocked(next);
          ++evicted;
          --over;
          moved = true;
        }
      }
      if (moved) ++rows_epoch_;
      // Rows the tier could not write are back in memory (at the end,
      // where this sweep has looked already); the next sweep tries again.
      if (!CommitSpilledLocked().ok()) break;
      if (next < 0) break;
    }
    // absl::Mutex is not fair: taking it again at once could keep pushes
    // and pulls waiting for the whole sweep. A pause lets them in between
    // holds.
    absl::SleepFor(absl::Microseconds(50));
  }
  ReserveTierIndex();
  return evicted;
}

void HashEmbeddingShard::ReserveTierIndex() {
  if (store_ == nullptr || !reserve_) return;
  absl::MutexLock lock(&mu_);
  // Rounds: evicting rows to free blocks spills them, which grows the
  // index again (by far less than the blocks given back).
  for (int round = 0; round < 4 && pins_.load() == 0; ++round) {
    const int64_t need = store_->index_bytes() - tier_index_reserved_;
    if (need <= 0) return;
    if (reserve_(need).ok()) {
      tier_index_reserved_ += need;
      return;
    }
    if (!eviction_.at_memory_limit()) {
      LOG_EVERY_N(WARNING, 100)
          << "hash embedding '" << layout_.spec.name() << "' shard " << shard_
          << ": the SSD tier's index needs " << need
          << " bytes more than the PS's memory gives; counted, not reserved";
      return;
    }
    const int64_t give_back = (need + block_bytes() - 1) / block_bytes();
    const int64_t keep = table_.num_blocks() - give_back;
    if (keep < 1) return;  // the shard keeps one block to work in
    if (table_.size() > keep * kRowsPerBlock) {
      if (!EvictLeastRecentLocked(table_.size() - keep * kRowsPerBlock, {})
               .ok()) {
        return;  // the rows stay in memory, and their blocks with them
      }
      if (table_.size() > keep * kRowsPerBlock) return;
    }
    table_.KeepBlocks(keep);
    reserve_(-give_back * block_bytes()).IgnoreError();  // gives back
    VLOG(1) << "hash embedding '" << layout_.spec.name() << "' shard " << shard_
            << ": " << give_back
            << " blocks given back to the PS for the SSD tier's index";
  }
}

void HashEmbeddingShard::RestoreVersion(int64_t version) {
  absl::MutexLock lock(&mu_);
  version_ = version;
}

absl::Status HashEmbeddingShard::CommitSpilledLocked() {
  absl::Status s = SpillStagedLocked();
  if (!evicted_ids_.empty()) {
    std::vector<int64_t> evicted;
    evicted.swap(evicted_ids_);
    if (!s.ok()) {  // those back in memory were not evicted
      evicted.erase(
          std::remove_if(evicted.begin(), evicted.end(),
                         [&](int64_t id) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                           return table_.Find(id) != kNoRow;
                         }),
          evicted.end());
    }
    if (!evicted.empty()) eviction_listener_(std::move(evicted));
  }
  return s;
}

absl::Status HashEmbeddingShard::SpillStagedLocked() {
  if (store_ == nullptr) return absl::OkStatus();
  const int64_t staged = store_->staged_rows();
  // Back where they were evicted from: CreateRow takes the values and
  // slots as a promotion would (counted back out of the tier's counts).
  absl::Status s = store_->Commit([this](int64_t id, const float* row) {
    mu_.AssertHeld();  // Commit calls back on this thread, under mu_
    CreateRow(id, row);
  });
  if (!s.ok()) {
    admission_.evicted_rows -= staged;
    admission_.promoted_rows -= staged;
    ++rows_epoch_;
    LOG_EVERY_N(WARNING, 100)
        << "hash embedding '" << layout_.spec.name() << "' shard " << shard_
        << ": " << staged << " rows to evict stay in memory: the SSD tier "
        << "could not write them: " << s;
  }
  return s;
}

void HashEmbeddingShard::PinRows(bool pin) const {
  if (store_ == nullptr) {
    pins_.fetch_add(pin ? 1 : -1);
    return;
  }
  // Under mu_: no row is spilled or promoted while the store's view and
  // its row count are taken together.
  absl::ReaderMutexLock lock(&mu_);
  if (pin) {
    store_->Pin();
    if (pins_.fetch_add(1) == 0) pinned_spilled_ = spilled_;
  } else {
    pins_.fetch_add(-1);
    store_->Unpin();
  }
}

HashRowCounts HashEmbeddingShard::row_counts() const {
  absl::ReaderMutexLock lock(&mu_);
  HashRowCounts counts = admission_;
  counts.spilled_rows = spilled_;
  if (store_ != nullptr) counts.spilled_bytes = store_->disk_bytes();
  return counts;
}

int64_t HashEmbeddingShard::num_rows() const {
  absl::ReaderMutexLock lock(&mu_);
  return table_.size() + spilled_;
}

int64_t HashEmbeddingShard::bytes() const {
  absl::ReaderMutexLock lock(&mu_);
  return table_.block_memory() + table_.index_memory() +
         (store_ != nullptr ? store_->memory_bytes() : 0) +
         (admission_policy_ != nullptr ? admission_policy_->bytes() : 0);
}

int64_t HashEmbeddingShard::version() const {
  absl::ReaderMutexLock lock(&mu_);
  return version_;
}

}  // namespace psrt

#include "ps_server/shards/memory_cold_tier.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace psrt {

MemoryColdTier::MemoryColdTier(int64_t row_floats) : row_floats_(row_floats) {}

void MemoryColdTier::SetFull(bool full) {
  absl::MutexLock lock(&mu_);
  full_ = full;
}

void MemoryColdTier::FailReads(absl::Status error) {
  absl::MutexLock lock(&mu_);
  read_error_ = std::move(error);
}

bool MemoryColdTier::SetStoredId(int64_t id, int64_t stored) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return false;
  records_[it->second].stored_id = stored;
  return true;
}

void MemoryColdTier::Spill(int64_t id, const float* row) {
  absl::MutexLock lock(&mu_);
  staged_.emplace_back(id, std::vector<float>(row, row + row_floats_));
}

int64_t MemoryColdTier::staged_rows() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(staged_.size());
}

absl::Status MemoryColdTier::Commit(const Unwritten& unwritten) {
  absl::MutexLock lock(&mu_);
  if (staged_.empty()) return absl::OkStatus();
  if (full_) {
    if (unwritten) {
      for (const auto& [id, row] : staged_) unwritten(id, row.data());
    }
    staged_.clear();
    return absl::InternalError(
        "in-memory cold tier: writing spilled rows failed: No space left on "
        "device");
  }
  for (auto& [id, row] : staged_) {
    auto [it, inserted] = index_.try_emplace(id, records_.size());
    if (!inserted) {
      records_[it->second].live = false;
      it->second = records_.size();
    }
    records_.push_back(Record{id, id, std::move(row)});
  }
  staged_.clear();
  CompactLocked();
  return absl::OkStatus();
}

absl::Status MemoryColdTier::CheckReadable(absl::Span<const int64_t> ids,
                                           absl::Span<const size_t> at) const {
  if (ids.empty()) return absl::OkStatus();
  if (!read_error_.ok()) return read_error_;
  for (size_t k = 0; k < ids.size(); ++k) {
    const int64_t stored = records_[at[k]].stored_id;
    if (stored != ids[k]) {
      return absl::DataLossError(
          absl::StrCat("in-memory cold tier: the record of id ", ids[k],
                       " (record ", at[k], ") holds id ", stored));
    }
  }
  return absl::OkStatus();
}

absl::Status MemoryColdTier::TakeMany(absl::Span<const int64_t> ids,
                                      float* rows, bool* found) {
  absl::MutexLock lock(&mu_);
  std::vector<int64_t> found_ids;
  std::vector<size_t> at, positions;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = index_.find(ids[i]);
    found[i] = it != index_.end();
    if (!found[i]) continue;
    found_ids.push_back(ids[i]);
    at.push_back(it->second);
    positions.push_back(i);
  }
  if (absl::Status s = CheckReadable(found_ids, at); !s.ok()) {
    std::fill_n(found, ids.size(), false);  // nothing taken
    return s;
  }
  for (size_t k = 0; k < at.size(); ++k) {
    Record& record = records_[at[k]];
    std::memcpy(rows + positions[k] * row_floats_, record.row.data(),
                row_floats_ * sizeof(float));
    record.live = false;
    index_.erase(found_ids[k]);
  }
  CompactLocked();
  return absl::OkStatus();
}

absl::Status MemoryColdTier::Read(absl::Span<const int64_t> ids, int64_t floats,
                                  float* out, bool* found) const {
  absl::MutexLock lock(&mu_);
  const bool read = floats > 0 && out != nullptr;
  std::vector<int64_t> found_ids;
  std::vector<size_t> at, positions;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = index_.find(ids[i]);
    found[i] = it != index_.end();
    if (!found[i] || !read) continue;
    found_ids.push_back(ids[i]);
    at.push_back(it->second);
    positions.push_back(i);
  }
  if (absl::Status s = CheckReadable(found_ids, at); !s.ok()) return s;
  const int64_t copied = std::min(floats, row_floats_);
  for (size_t k = 0; k < at.size(); ++k) {
    std::memcpy(out + positions[k] * floats, records_[at[k]].row.data(),
                copied * sizeof(float));
  }
  return absl::OkStatus();
}

void MemoryColdTier::Pin() {
  absl::MutexLock lock(&mu_);
  if (pins_ == 0) pinned_ = ExportOrderLocked();
  ++pins_;
}

void MemoryColdTier::Unpin() {
  absl::MutexLock lock(&mu_);
  if (--pins_ == 0) {
    pinned_.clear();
    CompactLocked();
  }
}

std::vector<size_t> MemoryColdTier::ExportOrderLocked() const {
  if (pins_ > 0) return pinned_;
  std::vector<size_t> order;
  for (size_t i = 0; i < records_.size(); ++i) {
    if (records_[i].live) order.push_back(i);
  }
  return order;
}

int64_t MemoryColdTier::Export(int64_t first, int64_t count, int64_t* ids,
                               float* out) {
  absl::MutexLock lock(&mu_);
  if (!read_error_.ok() && (ids != nullptr || out != nullptr)) return 0;
  const std::vector<size_t> order = ExportOrderLocked();
  int64_t n = 0;
  for (int64_t i = first; i < static_cast<int64_t>(order.size()) && n < count;
       ++i, ++n) {
    const Record& record = records_[order[i]];
    if (ids != nullptr) ids[n] = record.stored_id;
    if (out != nullptr) {
      std::memcpy(out + n * row_floats_, record.row.data(),
                  row_floats_ * sizeof(float));
    }
  }
  return n;
}

void MemoryColdTier::CompactLocked() {
  if (pins_ > 0) return;
  const size_t live = index_.size();
  if (records_.size() - live <= 2 * live) return;
  std::vector<Record> kept;
  kept.reserve(live);
  for (Record& record : records_) {
    if (record.live) kept.push_back(std::move(record));
  }
  records_ = std::move(kept);
  for (size_t i = 0; i < records_.size(); ++i) index_[records_[i].id] = i;
}

int64_t MemoryColdTier::rows() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(index_.size());
}

int64_t MemoryColdTier::disk_bytes() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(records_.size()) *
         (static_cast<int64_t>(sizeof(int64_t)) +
          row_floats_ * static_cast<int64_t>(sizeof(float)));
}

int64_t MemoryColdTier::index_bytes() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(index_.capacity() *
                              (sizeof(std::pair<const int64_t, size_t>) + 1));
}

int64_t MemoryColdTier::memory_bytes() const { return index_bytes(); }

}  // namespace psrt

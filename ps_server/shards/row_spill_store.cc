#include "ps_server/shards/row_spill_store.h"

#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace psrt {
namespace {

constexpr unsigned kRingEntries = 256;

// One io_uring per thread that reads spilled rows: pulls read the tier
// from several threads at once, and a ring is not shared between threads.
class ThreadRing {
 public:
  ~ThreadRing() {
    if (ready_) io_uring_queue_exit(&ring_);
  }
  // Null where the kernel refuses io_uring (reads fall back to pread).
  io_uring* Get() {
    if (!tried_) {
      tried_ = true;
      const int rc = io_uring_queue_init(kRingEntries, &ring_, 0);
      ready_ = rc == 0;
      if (!ready_) {
        LOG_FIRST_N(WARNING, 1)
            << "SSD tier: io_uring unavailable (" << std::strerror(-rc)
            << "); spilled rows are read with pread, one call each";
      }
    }
    return ready_ ? &ring_ : nullptr;
  }
  void Break() {
    if (ready_) io_uring_queue_exit(&ring_);
    ready_ = false;
  }

 private:
  io_uring ring_;
  bool tried_ = false;
  bool ready_ = false;
};

thread_local ThreadRing thread_ring;

absl::Status IoError(const std::string& dir, absl::string_view what,
                     int error) {
  return absl::InternalError(absl::StrCat("SSD tier store ", dir, ": ", what,
                                          " failed: ", std::strerror(error)));
}

absl::Status PreadFully(const std::string& dir, int fd, char* buf,
                        int64_t bytes, int64_t offset) {
  while (bytes > 0) {
    const ssize_t n = pread(fd, buf, bytes, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError(dir, "reading rows", errno);
    if (n == 0) {
      return absl::DataLossError(
          absl::StrCat("SSD tier store ", dir, ": file ends at ", offset,
                       " bytes, before a record it indexes"));
    }
    buf += n;
    bytes -= n;
    offset += n;
  }
  return absl::OkStatus();
}

absl::Status PwriteFully(const std::string& dir, int fd, const char* buf,
                         int64_t bytes, int64_t offset) {
  while (bytes > 0) {
    const ssize_t n = pwrite(fd, buf, bytes, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError(dir, "writing spilled rows", errno);
    buf += n;
    bytes -= n;
    offset += n;
  }
  return absl::OkStatus();
}

int64_t RecordId(const char* record) {
  int64_t id;
  std::memcpy(&id, record, sizeof(id));
  return id;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RowSpillStore>> RowSpillStore::Open(
    const std::string& dir, int64_t row_floats, bool use_io_uring) {
  if (row_floats <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("SSD tier rows need a positive width, got ", row_floats));
  }
  std::error_code error;
  std::filesystem::remove_all(dir, error);
  if (!error) std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("SSD tier directory ", dir,
                     " cannot be emptied and created: ", error.message()));
  }
  const std::string path = dir + "/rows";
  const int fd =
      open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return IoError(dir, "creating " + path, errno);
  return std::unique_ptr<RowSpillStore>(
      new RowSpillStore(dir, fd, row_floats, use_io_uring));
}

RowSpillStore::RowSpillStore(std::string dir, int fd, int64_t row_floats,
                             bool use_io_uring)
    : dir_(std::move(dir)),
      fd_(fd),
      row_bytes_(row_floats * static_cast<int64_t>(sizeof(float))),
      record_bytes_(sizeof(int64_t) + row_bytes_),
      segment_records_(static_cast<uint32_t>(
          std::max<int64_t>(1, kSegmentBytes / record_bytes_))),
      use_io_uring_(use_io_uring) {}

RowSpillStore::~RowSpillStore() {
  close(fd_);
  std::error_code error;
  std::filesystem::remove_all(dir_, error);
}

int64_t RowSpillStore::SlotOffset(uint32_t slot) const {
  return static_cast<int64_t>(slot) * record_bytes_;
}

int64_t RowSpillStore::used_records() const {
  if (active_segment_ == kNoSegment) return 0;
  return (segments_in_use_.load() - 1) * segment_records_ + active_fill_;
}

void RowSpillStore::Spill(int64_t id, const float* row) {
  const size_t at = staged_.size();
  staged_.resize(at + record_bytes_);
  std::memcpy(&staged_[at], &id, sizeof(id));
  std::memcpy(&staged_[at + sizeof(id)], row, row_bytes_);
}

int64_t RowSpillStore::staged_rows() const {
  return static_cast<int64_t>(staged_.size()) / record_bytes_;
}

absl::Status RowSpillStore::Commit(const Unwritten& unwritten) {
  if (staged_.empty()) return absl::OkStatus();
  const int64_t written = staged_rows();
  absl::Status s = WriteStaged(unwritten);
  if (!s.ok()) return s;
  if (pins_.load() > 0) return absl::OkStatus();  // records stay in place
  // Garbage is let grow to twice the live records (the file to three
  // times them): the emptiest segment is then at most a third live, so
  // moving it frees two thirds of a segment, and two moves for each
  // segment written keep up.
  const int budget = 1 + static_cast<int>(2 * written / segment_records_);
  if (s = MoveLiveRecords(budget); !s.ok()) {
    LOG(WARNING) << s << " (the rows stay where they are)";
  }
  return absl::OkStatus();
}

absl::Status RowSpillStore::WriteStaged(const Unwritten& unwritten) {
  const int64_t count = staged_rows();
  std::vector<uint32_t> slots(count);
  std::vector<uint32_t> left_behind;  // segments filled by this write
  absl::Status status;
  for (int64_t i = 0; i < count;) {
    if (active_segment_ == kNoSegment || active_fill_ == segment_records_) {
      const uint32_t left = active_segment_;
      uint32_t next;
      if (!free_segments_.empty()) {
        next = free_segments_.back();
        free_segments_.pop_back();
      } else {
        const uint64_t segments = segment_live_.size();
        if ((segments + 1) * segment_records_ > ~uint32_t{0}) {
          status = absl::ResourceExhaustedError(
              absl::StrCat("SSD tier store ", dir_, " is full: ", segments,
                           " segments of ", segment_records_, " rows"));
          break;
        }
        next = static_cast<uint32_t>(segments);
        segment_live_.push_back(0);
        segment_in_use_.push_back(false);
        live_.resize(((segments + 1) * segment_records_ + 63) / 64, 0);
      }
      segment_in_use_[next] = true;
      ++segments_in_use_;
      active_segment_ = next;
      active_fill_ = 0;
      if (left != kNoSegment) left_behind.push_back(left);
    }
    // The staged records that fit the active segment: one write.
    const int64_t take =
        std::min<int64_t>(count - i, segment_records_ - active_fill_);
    const uint32_t first = active_segment_ * segment_records_ + active_fill_;
    status = PwriteFully(dir_, fd_, &staged_[i * record_bytes_],
                         take * record_bytes_, SlotOffset(first));
    // Written or not, the records' room is used (garbage on an error).
    active_fill_ += static_cast<uint32_t>(take);
    if (!status.ok()) break;
    for (int64_t k = 0; k < take; ++k) slots[i + k] = first + k;
    i += take;
  }
  if (status.ok()) {
    // Indexed once all are written: on an error none of them is in the
    // store (and a record moved stays at its old place).
    for (int64_t i = 0; i < count; ++i) {
      const int64_t id = RecordId(&staged_[i * record_bytes_]);
      auto [it, inserted] = index_.try_emplace(id, slots[i]);
      if (!inserted) {
        DropRecord(it->second);
        it->second = slots[i];
      }
      live_[slots[i] / 64] |= uint64_t{1} << (slots[i] % 64);
      ++segment_live_[slots[i] / segment_records_];
    }
  }
  // A segment filled and left holds no live record only if every record
  // in it was taken (or failed to write): then it is reused.
  for (uint32_t segment : left_behind) {
    if (segment_live_[segment] == 0 && segment != active_segment_) {
      FreeSegment(segment);
    }
  }
  if (!status.ok() && unwritten) {
    std::vector<float> row(row_bytes_ / sizeof(float));
    for (int64_t i = 0; i < count; ++i) {
      const char* record = &staged_[i * record_bytes_];
      std::memcpy(row.data(), record + sizeof(int64_t), row_bytes_);
      unwritten(RecordId(record), row.data());
    }
  }
  staged_.clear();
  if (staged_.capacity() > static_cast<size_t>(kSegmentBytes)) {
    staged_.shrink_to_fit();
  }
  return status;
}

void RowSpillStore::DropRecord(uint32_t slot) {
  live_[slot / 64] &= ~(uint64_t{1} << (slot % 64));
  const uint32_t segment = slot / segment_records_;
  if (--segment_live_[segment] == 0 && segment != active_segment_) {
    FreeSegment(segment);
  }
}

void RowSpillStore::FreeSegment(uint32_t segment) {
  if (!segment_in_use_[segment]) return;
  segment_in_use_[segment] = false;
  if (pins_.load() > 0) {
    // A pinned export may still read its records: reused after the last
    // unpin (until then counted in use, its records garbage).
    absl::MutexLock lock(&export_mu_);
    freed_while_pinned_.push_back(segment);
    return;
  }
  free_segments_.push_back(segment);
  --segments_in_use_;
}

absl::Status RowSpillStore::MoveLiveRecords(int budget) {
  for (int moved = 0; moved < budget; ++moved) {
    const int64_t live = rows();
    if (used_records() - live <= 2 * live + segment_records_) break;
    // The emptiest full segment (every segment in use but the active one
    // is full).
    uint32_t emptiest = kNoSegment;
    for (uint32_t s = 0; s < segment_live_.size(); ++s) {
      if (!segment_in_use_[s] || s == active_segment_) continue;
      if (emptiest == kNoSegment ||
          segment_live_[s] < segment_live_[emptiest]) {
        emptiest = s;
      }
    }
    if (emptiest == kNoSegment) break;
    if (segment_live_[emptiest] == 0) {  // its records failed to write
      FreeSegment(emptiest);
      continue;
    }
    const uint32_t first = emptiest * segment_records_;
    segment_buffer_.resize(segment_records_ * record_bytes_);
    if (absl::Status s = PreadFully(dir_, fd_, segment_buffer_.data(),
                                    segment_buffer_.size(), SlotOffset(first));
        !s.ok()) {
      return s;
    }
    // Each live record must hold the id indexed at its place: one whose
    // bytes changed under the store would be indexed, moved, under the id
    // it holds now (over that id's own row). Such a segment stays.
    for (uint32_t k = 0; k < segment_records_; ++k) {
      if (!Live(first + k)) continue;
      const int64_t id = RecordId(&segment_buffer_[k * record_bytes_]);
      auto it = index_.find(id);
      if (it == index_.end() || it->second != first + k) {
        return absl::DataLossError(absl::StrCat(
            "SSD tier store ", dir_, ": the record at byte ",
            SlotOffset(first + k), " holds id ", id,
            ", which is not indexed there (its bytes changed on disk); ",
            "its segment is not moved"));
      }
    }
    for (uint32_t k = 0; k < segment_records_; ++k) {
      if (!Live(first + k)) continue;
      const char* record = &segment_buffer_[k * record_bytes_];
      const size_t at = staged_.size();
      staged_.resize(at + record_bytes_);
      std::memcpy(&staged_[at], record, record_bytes_);
    }
    // Rewritten, each record's id points at its new place and the old one
    // is dropped, which frees this segment.
    if (absl::Status s = WriteStaged(nullptr); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status RowSpillStore::ReadRecords(absl::Span<const uint32_t> slots,
                                        absl::Span<const int64_t> ids,
                                        char* records) const {
  const size_t n = slots.size();
  std::vector<bool> done(n, false);
  io_uring* ring = use_io_uring_ ? thread_ring.Get() : nullptr;
  for (size_t begin = 0; ring != nullptr && begin < n; begin += kRingEntries) {
    const size_t end = std::min(n, begin + kRingEntries);
    for (size_t i = begin; i < end; ++i) {
      io_uring_sqe* sqe = io_uring_get_sqe(ring);
      io_uring_prep_read(sqe, fd_, records + i * record_bytes_, record_bytes_,
                         SlotOffset(slots[i]));
      io_uring_sqe_set_data64(sqe, i);
    }
    const int submitted = io_uring_submit_and_wait(ring, end - begin);
    if (submitted != static_cast<int>(end - begin)) {
      // The ring is in an unknown state: this thread reads with pread.
      LOG(WARNING) << "SSD tier store " << dir_ << ": io_uring submit gave "
                   << submitted << " of " << end - begin
                   << "; reading with pread from now on in this thread";
      thread_ring.Break();
      break;
    }
    for (size_t got = 0; got < end - begin;) {
      io_uring_cqe* cqe = nullptr;
      if (io_uring_wait_cqe(ring, &cqe) != 0) {
        thread_ring.Break();  // waits out the reads still in flight
        ring = nullptr;
        break;
      }
      const uint64_t i = io_uring_cqe_get_data64(cqe);
      // Short or failed reads are redone below with pread.
      if (cqe->res == record_bytes_ && i < n) done[i] = true;
      io_uring_cqe_seen(ring, cqe);
      ++got;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (done[i]) continue;
    if (absl::Status s = PreadFully(dir_, fd_, records + i * record_bytes_,
                                    record_bytes_, SlotOffset(slots[i]));
        !s.ok()) {
      return s;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const int64_t id = RecordId(records + i * record_bytes_);
    if (id != ids[i]) {
      return absl::DataLossError(
          absl::StrCat("SSD tier store ", dir_, ": the record of id ", ids[i],
                       " (at byte ", SlotOffset(slots[i]), ") holds id ", id));
    }
  }
  return absl::OkStatus();
}

absl::Status RowSpillStore::FindAndRead(absl::Span<const int64_t> ids,
                                        bool read, bool* found,
                                        Found* records) const {
  std::vector<int64_t> found_ids;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = index_.find(ids[i]);
    found[i] = it != index_.end();
    if (found[i] && read) {
      records->at.push_back(i);
      records->slots.push_back(it->second);
      found_ids.push_back(ids[i]);
    }
  }
  if (records->slots.empty()) return absl::OkStatus();
  records->records.resize(records->slots.size() * record_bytes_);
  return ReadRecords(records->slots, found_ids, records->records.data());
}

absl::Status RowSpillStore::TakeMany(absl::Span<const int64_t> ids, float* rows,
                                     bool* found) {
  Found taken;
  if (absl::Status s = FindAndRead(ids, /*read=*/true, found, &taken);
      !s.ok()) {
    std::fill_n(found, ids.size(), false);  // nothing taken
    return s;
  }
  const int64_t floats = row_bytes_ / static_cast<int64_t>(sizeof(float));
  for (size_t k = 0; k < taken.at.size(); ++k) {
    std::memcpy(rows + taken.at[k] * floats,
                &taken.records[k * record_bytes_ + sizeof(int64_t)],
                row_bytes_);
    DropRecord(taken.slots[k]);
    index_.erase(ids[taken.at[k]]);
  }
  return absl::OkStatus();
}

absl::Status RowSpillStore::Read(absl::Span<const int64_t> ids, int64_t floats,
                                 float* out, bool* found) const {
  Found read;
  if (absl::Status s =
          FindAndRead(ids, floats > 0 && out != nullptr, found, &read);
      !s.ok()) {
    return s;
  }
  const size_t bytes = std::min<int64_t>(floats * sizeof(float), row_bytes_);
  for (size_t k = 0; k < read.at.size(); ++k) {
    std::memcpy(out + read.at[k] * floats,
                &read.records[k * record_bytes_ + sizeof(int64_t)], bytes);
  }
  return absl::OkStatus();
}

void RowSpillStore::Pin() {
  absl::MutexLock lock(&export_mu_);
  if (pins_.fetch_add(1) == 0) {
    pinned_live_ = live_;
    cursor_position_ = -1;
  }
}

void RowSpillStore::Unpin() {
  absl::MutexLock lock(&export_mu_);
  if (pins_.fetch_sub(1) == 1) {
    pinned_live_.clear();
    pinned_live_.shrink_to_fit();
    cursor_position_ = -1;
    for (uint32_t segment : freed_while_pinned_) {
      // Still empty: no record is appended to a segment not yet freed.
      free_segments_.push_back(segment);
      --segments_in_use_;
    }
    freed_while_pinned_.clear();
  }
}

int64_t RowSpillStore::Export(int64_t first, int64_t count, int64_t* ids,
                              float* out) {
  absl::MutexLock lock(&export_mu_);
  const std::vector<uint64_t>& bits = pins_.load() > 0 ? pinned_live_ : live_;
  const uint64_t slots = bits.size() * 64;
  if (first != cursor_position_) {
    // Skips `first` live records, a word at a time.
    cursor_slot_ = 0;
    int64_t skip = first;
    for (; cursor_slot_ < slots; cursor_slot_ += 64) {
      const int live = __builtin_popcountll(bits[cursor_slot_ / 64]);
      if (live > skip) break;
      skip -= live;
    }
    for (; skip > 0 && cursor_slot_ < slots; ++cursor_slot_) {
      if (Bit(bits, cursor_slot_)) --skip;
    }
    cursor_position_ = first;
  }
  const int64_t floats = row_bytes_ / static_cast<int64_t>(sizeof(float));
  std::vector<char> span;
  int64_t n = 0;
  while (n < count && cursor_slot_ < slots) {
    // The live records left in this segment (up to `count`), read with
    // one call covering them.
    const uint64_t segment_end = std::min<uint64_t>(
        slots, (cursor_slot_ / segment_records_ + 1) * segment_records_);
    std::vector<uint32_t> live;
    uint64_t slot = cursor_slot_;
    for (; slot < segment_end && n + static_cast<int64_t>(live.size()) < count;
         ++slot) {
      if (Bit(bits, slot)) {
        live.push_back(static_cast<uint32_t>(slot));
      }
    }
    if (!live.empty() && (ids != nullptr || out != nullptr)) {
      const uint32_t from = live.front();
      span.resize((live.back() - from + 1) * record_bytes_);
      if (absl::Status s =
              PreadFully(dir_, fd_, span.data(), span.size(), SlotOffset(from));
          !s.ok()) {
        LOG(ERROR) << s;
        break;  // the export ends early: the caller sees fewer rows
      }
      for (size_t k = 0; k < live.size(); ++k) {
        const char* record = &span[(live[k] - from) * record_bytes_];
        if (ids != nullptr) ids[n + k] = RecordId(record);
        if (out != nullptr) {
          std::memcpy(out + (n + k) * floats, record + sizeof(int64_t),
                      row_bytes_);
        }
      }
    }
    n += static_cast<int64_t>(live.size());
    cursor_slot_ = slot;
  }
  cursor_position_ += n;
  return n;
}

int64_t RowSpillStore::disk_bytes() const {
  return segments_in_use_.load() * segment_records_ * record_bytes_ +
         static_cast<int64_t>(staged_.size());
}

int64_t RowSpillStore::memory_bytes() const {
  int64_t pinned = 0;
  {
    absl::MutexLock lock(&export_mu_);
    pinned = static_cast<int64_t>(pinned_live_.capacity() * sizeof(uint64_t));
  }
  return index_bytes() +
         static_cast<int64_t>(staged_.capacity() + segment_buffer_.capacity()) +
         pinned;
}

int64_t RowSpillStore::index_bytes() const {
  return static_cast<int64_t>(
      index_.capacity() * (sizeof(std::pair<const int64_t, uint32_t>) + 1) +
      live_.capacity() * sizeof(uint64_t) +
      segment_live_.capacity() * sizeof(uint32_t) +
      segment_in_use_.capacity() / 8 +
      free_segments_.capacity() * sizeof(uint32_t));
}

}  // namespace psrt

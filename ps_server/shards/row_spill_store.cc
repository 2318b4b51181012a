#include "ps_server/shards/row_spill_store.h"

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"

namespace psrt {
namespace {

// Ids big-endian with the sign bit flipped: the store's order is the ids'.
void EncodeKey(int64_t id, char* key) {
  const uint64_t u = static_cast<uint64_t>(id) ^ (uint64_t{1} << 63);
  for (int i = 0; i < 8; ++i) key[i] = static_cast<char>(u >> (56 - 8 * i));
}

int64_t DecodeKey(const char* key) {
  uint64_t u = 0;
  for (int i = 0; i < 8; ++i) u = (u << 8) | static_cast<unsigned char>(key[i]);
  return static_cast<int64_t>(u ^ (uint64_t{1} << 63));
}

absl::Status StoreError(const std::string& dir, absl::string_view what,
                        const rocksdb::Status& s) {
  return absl::InternalError(absl::StrCat("SSD tier store ", dir, ": ", what,
                                          " failed: ", s.ToString()));
}

rocksdb::WriteOptions NoLog() {
  rocksdb::WriteOptions options;
  options.disableWAL = true;  // checkpoints are what restores the rows
  return options;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RowSpillStore>> RowSpillStore::Open(
    const std::string& dir, int64_t row_floats) {
  std::error_code error;
  std::filesystem::remove_all(dir, error);
  if (!error) std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("SSD tier directory ", dir,
                     " cannot be emptied and created: ", error.message()));
  }
  rocksdb::Options options;
  options.create_if_missing = true;
  options.error_if_exists = true;
  options.write_buffer_size = kWriteBufferBytes;
  options.max_write_buffer_number = 2;
  options.compression = rocksdb::kNoCompression;  // float rows barely shrink
  options.max_open_files = 256;
  options.max_background_jobs = 2;
  rocksdb::BlockBasedTableOptions table;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  // Index and filter blocks are cached (bounded memory), partitioned so a
  // lookup reads one small partition, not a whole file's filter, and kept
  // at high priority so the rows' data blocks do not push them out.
  table.block_cache = rocksdb::NewLRUCache(kBlockCacheBytes,
                                           /*num_shard_bits=*/-1,
                                           /*strict_capacity_limit=*/false,
                                           /*high_pri_pool_ratio=*/0.75);
  table.cache_index_and_filter_blocks = true;
  table.cache_index_and_filter_blocks_with_high_priority = true;
  table.pin_l0_filter_and_index_blocks_in_cache = true;
  table.pin_top_level_index_and_filter = true;
  table.index_type = rocksdb::BlockBasedTableOptions::kTwoLevelIndexSearch;
  table.partition_filters = true;
  table.metadata_block_size = 4096;
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, dir, &db);
  if (!s.ok()) return StoreError(dir, "opening", s);
  return std::unique_ptr<RowSpillStore>(new RowSpillStore(dir, row_floats, db));
}

RowSpillStore::RowSpillStore(std::string dir, int64_t row_floats,
                             rocksdb::DB* db)
    : dir_(std::move(dir)),
      row_bytes_(row_floats * static_cast<int64_t>(sizeof(float))),
      db_(db),
      staged_(std::make_unique<rocksdb::WriteBatch>()) {}

RowSpillStore::~RowSpillStore() {
  {
    absl::MutexLock lock(&export_mu_);
    cursor_.reset();
    if (snapshot_ != nullptr) db_->ReleaseSnapshot(snapshot_);
  }
  db_.reset();
  std::error_code error;
  std::filesystem::remove_all(dir_, error);
}

void RowSpillStore::Spill(int64_t id, const float* row) {
  char key[8];
  EncodeKey(id, key);
  staged_->Put(rocksdb::Slice(key, 8),
               rocksdb::Slice(reinterpret_cast<const char*>(row), row_bytes_));
}

int64_t RowSpillStore::staged_rows() const { return staged_->Count(); }

absl::Status RowSpillStore::Commit() {
  if (staged_->Count() == 0) return absl::OkStatus();
  rocksdb::Status s = db_->Write(NoLog(), staged_.get());
  staged_->Clear();
  if (!s.ok()) return StoreError(dir_, "writing spilled rows", s);
  return absl::OkStatus();
}

absl::StatusOr<bool> RowSpillStore::Take(int64_t id, float* row) {
  char key[8];
  EncodeKey(id, key);
  rocksdb::PinnableSlice value;
  rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), db_->DefaultColumnFamily(),
               rocksdb::Slice(key, 8), &value);
  if (s.IsNotFound()) return false;
  if (!s.ok()) return StoreError(dir_, "reading a row", s);
  if (static_cast<int64_t>(value.size()) != row_bytes_) {
    return absl::DataLossError(
        absl::StrCat("SSD tier store ", dir_, ": row of id ", id, " has ",
                     value.size(), " bytes, not ", row_bytes_));
  }
  std::memcpy(row, value.data(), row_bytes_);
  s = db_->Delete(NoLog(), rocksdb::Slice(key, 8));
  if (!s.ok()) return StoreError(dir_, "deleting a promoted row", s);
  return true;
}

absl::Status RowSpillStore::TakeMany(absl::Span<const int64_t> ids, float* rows,
                                     bool* found) {
  const int64_t floats = row_bytes_ / static_cast<int64_t>(sizeof(float));
  if (absl::Status s = Read(ids, floats, rows, found); !s.ok()) return s;
  rocksdb::WriteBatch deletes;
  char key[8];
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!found[i]) continue;
    EncodeKey(ids[i], key);
    deletes.Delete(rocksdb::Slice(key, 8));
  }
  if (deletes.Count() == 0) return absl::OkStatus();
  rocksdb::Status s = db_->Write(NoLog(), &deletes);
  if (!s.ok()) return StoreError(dir_, "deleting promoted rows", s);
  return absl::OkStatus();
}

absl::Status RowSpillStore::Read(absl::Span<const int64_t> ids, int64_t floats,
                                 float* out, bool* found) const {
  if (ids.empty()) return absl::OkStatus();
  std::vector<char> keys(ids.size() * 8);
  std::vector<rocksdb::Slice> slices(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    EncodeKey(ids[i], &keys[i * 8]);
    slices[i] = rocksdb::Slice(&keys[i * 8], 8);
  }
  std::vector<rocksdb::PinnableSlice> values(ids.size());
  std::vector<rocksdb::Status> statuses(ids.size());
  db_->MultiGet(rocksdb::ReadOptions(), db_->DefaultColumnFamily(), ids.size(),
                slices.data(), values.data(), statuses.data());
  const size_t bytes = floats * sizeof(float);
  for (size_t i = 0; i < ids.size(); ++i) {
    found[i] = statuses[i].ok();
    if (statuses[i].IsNotFound()) continue;
    if (!statuses[i].ok()) return StoreError(dir_, "reading rows", statuses[i]);
    if (values[i].size() != static_cast<size_t>(row_bytes_)) {
      return absl::DataLossError(
          absl::StrCat("SSD tier store ", dir_, ": row of id ", ids[i], " has ",
                       values[i].size(), " bytes, not ", row_bytes_));
    }
    std::memcpy(out + i * floats, values[i].data(), bytes);
  }
  return absl::OkStatus();
}

void RowSpillStore::Pin() {
  absl::MutexLock lock(&export_mu_);
  if (pins_++ == 0) {
    snapshot_ = db_->GetSnapshot();
    cursor_.reset();
  }
}

void RowSpillStore::Unpin() {
  absl::MutexLock lock(&export_mu_);
  if (--pins_ == 0) {
    cursor_.reset();
    db_->ReleaseSnapshot(snapshot_);
    snapshot_ = nullptr;
  }
}

int64_t RowSpillStore::Export(int64_t first, int64_t count, int64_t* ids,
                              float* out) {
  absl::MutexLock lock(&export_mu_);
  if (cursor_ == nullptr || first != cursor_position_) {
    rocksdb::ReadOptions options;
    options.snapshot = snapshot_;  // null unpinned: the store as it is now
    options.fill_cache = false;    // a pass over every row
    cursor_.reset(db_->NewIterator(options));
    cursor_->SeekToFirst();
    for (cursor_position_ = 0; cursor_position_ < first && cursor_->Valid();
         ++cursor_position_) {
      cursor_->Next();
    }
  }
  int64_t n = 0;
  for (; n < count && cursor_->Valid(); ++n, cursor_->Next()) {
    if (ids != nullptr) ids[n] = DecodeKey(cursor_->key().data());
    if (out != nullptr) {
      const rocksdb::Slice value = cursor_->value();
      std::memset(out + n * (row_bytes_ / sizeof(float)), 0, row_bytes_);
      std::memcpy(out + n * (row_bytes_ / sizeof(float)), value.data(),
                  std::min<size_t>(value.size(), row_bytes_));
    }
  }
  cursor_position_ += n;
  if (!cursor_->Valid()) cursor_.reset();
  return n;
}

int64_t RowSpillStore::disk_bytes() const {
  uint64_t files = 0, buffers = 0;
  db_->GetIntProperty("rocksdb.total-sst-files-size", &files);
  db_->GetIntProperty("rocksdb.cur-size-all-mem-tables", &buffers);
  return static_cast<int64_t>(files + buffers);
}

}  // namespace psrt

#include "ps_worker/data/example_cache_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/crc32c.h"

namespace psrt {
namespace {

constexpr char kHeaderMagic[] = "PSRTEXC2";
constexpr char kFooterMagic[] = "PSRTEND1";
constexpr size_t kMagicBytes = 8;
constexpr size_t kChunkHeaderBytes = 20;
// Chunk flags: the ids are stored as u32 (every one in [0, 2^32)); the
// values are omitted (every one 1.0, as binary features are).
constexpr uint32_t kIds32 = 1;
constexpr uint32_t kValuesAreOne = 2;
constexpr size_t kFooterBytes = kMagicBytes + 16;
// Examples a writer puts in a chunk, and the most a reader accepts (a
// hostile count must not size a buffer).
constexpr uint32_t kChunkExamples = 4096;
constexpr uint32_t kMaxChunkExamples = 1 << 20;
constexpr uint32_t kMaxKeyBytes = 16 << 20;  // a line per input file

// FNV-1a, 64 bits: stable across runs and builds (absl::Hash is not).
uint64_t StableHash(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

template <typename T>
void AppendRaw(const std::vector<T>& v, std::string* out) {
  if (v.empty()) return;  // data() may be null
  out->append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// memcpy that accepts an empty vector's null data() when there is nothing
// to copy (memcpy itself must not be passed null, even for 0 bytes).
void CopyBytes(void* to, const void* from, size_t n) {
  if (n > 0) std::memcpy(to, from, n);
}

uint32_t LoadU32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

uint64_t LoadU64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

}  // namespace

std::string ExampleCachePath(const std::string& dir, const std::string& key) {
  return absl::StrFormat("%s/psrt-examples-%016x.cache", dir, StableHash(key));
}

absl::StatusOr<std::unique_ptr<ExampleCacheWriter>> ExampleCacheWriter::Create(
    const std::string& path, const std::string& key) {
  if (key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("example cache key of ", key.size(), " bytes (at most ",
                     kMaxKeyBytes, ")"));
  }
  std::error_code error;
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create the cache directory ", dir.string(), ": ",
                     error.message()));
  }
  std::string temp = absl::StrCat(path, ".tmp-", getpid());
  std::FILE* file = std::fopen(temp.c_str(), "wb");
  if (file == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write ", temp, ": ", std::strerror(errno)));
  }
  std::unique_ptr<ExampleCacheWriter> w(
      new ExampleCacheWriter(path, std::move(temp), file));
  const uint32_t key_bytes = static_cast<uint32_t>(key.size());
  absl::Status s = w->Write(kHeaderMagic, kMagicBytes);
  if (s.ok()) s = w->Write(&key_bytes, sizeof(key_bytes));
  if (s.ok()) s = w->Write(key.data(), key.size());
  if (!s.ok()) return s;
  return w;
}

ExampleCacheWriter::~ExampleCacheWriter() {
  if (file_ != nullptr) std::fclose(file_);
  if (!finished_) std::remove(temp_.c_str());
}

absl::Status ExampleCacheWriter::Write(const void* data, size_t n) {
  if (std::fwrite(data, 1, n, file_) != n) {
    return absl::ResourceExhaustedError(
        absl::StrCat("writing ", temp_, ": ", std::strerror(errno)));
  }
  bytes_ += static_cast<int64_t>(n);
  return absl::OkStatus();
}

absl::Status ExampleCacheWriter::Add(const Example& example) {
  if (example.ids.size() != example.values.size()) {
    return absl::InvalidArgumentError(
        "example cache: an example with ids and values of different counts");
  }
  chunk_.labels.push_back(example.label);
  chunk_.ids.insert(chunk_.ids.end(), example.ids.begin(), example.ids.end());
  chunk_.values.insert(chunk_.values.end(), example.values.begin(),
                       example.values.end());
  chunk_.dense.insert(chunk_.dense.end(), example.dense.begin(),
                      example.dense.end());
  id_counts_.push_back(static_cast<uint32_t>(example.ids.size()));
  dense_counts_.push_back(static_cast<uint32_t>(example.dense.size()));
  ++chunk_.size;
  ++examples_;
  // A chunk's counts are u32: flush well before the ids could overflow.
  if (chunk_.size == static_cast<int>(kChunkExamples) ||
      chunk_.ids.size() > (size_t{1} << 26) ||
      chunk_.dense.size() > (size_t{1} << 26)) {
    return WriteChunk();
  }
  return absl::OkStatus();
}

absl::Status ExampleCacheWriter::WriteChunk() {
  if (chunk_.size == 0) return absl::OkStatus();
  std::string payload;
  AppendRaw(chunk_.labels, &payload);
  AppendRaw(id_counts_, &payload);
  AppendRaw(dense_counts_, &payload);
  uint32_t flags = 0;
  if (std::all_of(chunk_.ids.begin(), chunk_.ids.end(), [](int64_t id) {
        return id >= 0 && id <= int64_t{0xffffffff};
      })) {
    flags |= kIds32;
    std::vector<uint32_t> narrow(chunk_.ids.begin(), chunk_.ids.end());
    AppendRaw(narrow, &payload);
  } else {
    AppendRaw(chunk_.ids, &payload);
  }
  if (std::all_of(chunk_.values.begin(), chunk_.values.end(),
                  [](float v) { return v == 1.0f; })) {
    flags |= kValuesAreOne;
  } else {
    AppendRaw(chunk_.values, &payload);
  }
  AppendRaw(chunk_.dense, &payload);
  const uint32_t header[5] = {static_cast<uint32_t>(chunk_.size),
                              static_cast<uint32_t>(chunk_.ids.size()),
                              static_cast<uint32_t>(chunk_.dense.size()), flags,
                              Crc32c(payload.data(), payload.size())};
  chunk_.Clear();
  id_counts_.clear();
  dense_counts_.clear();
  ++chunks_;
  if (absl::Status s = Write(header, sizeof(header)); !s.ok()) return s;
  return Write(payload.data(), payload.size());
}

absl::Status ExampleCacheWriter::Finish() {
  if (absl::Status s = WriteChunk(); !s.ok()) return s;
  const uint64_t counts[2] = {static_cast<uint64_t>(examples_),
                              static_cast<uint64_t>(chunks_)};
  if (absl::Status s = Write(kFooterMagic, kMagicBytes); !s.ok()) return s;
  if (absl::Status s = Write(counts, sizeof(counts)); !s.ok()) return s;
  const bool flushed = std::fflush(file_) == 0 && fsync(fileno(file_)) == 0;
  const int closed = std::fclose(file_);
  file_ = nullptr;
  if (!flushed || closed != 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("writing ", temp_, ": ", std::strerror(errno)));
  }
  if (std::rename(temp_.c_str(), path_.c_str()) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "renaming ", temp_, " to ", path_, ": ", std::strerror(errno)));
  }
  finished_ = true;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ExampleCacheReader>> ExampleCacheReader::Open(
    const std::string& path, const std::string& key, bool verify_chunks) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat("no example cache ", path));
    }
    return absl::PermissionDeniedError(
        absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  std::unique_ptr<ExampleCacheReader> r(new ExampleCacheReader(path, file));
  struct stat st;
  if (fstat(fileno(file), &st) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot stat ", path, ": ", std::strerror(errno)));
  }
  r->file_bytes_ = st.st_size;
  char head[kMagicBytes + 4];
  if (r->file_bytes_ < static_cast<int64_t>(sizeof(head) + kFooterBytes) ||
      std::fread(head, 1, sizeof(head), file) != sizeof(head) ||
      std::memcmp(head, kHeaderMagic, kMagicBytes) != 0) {
    return r->Damaged(0, "not an example cache (no PSRTEXC1 header)");
  }
  const uint32_t key_bytes = LoadU32(head + kMagicBytes);
  if (key_bytes > kMaxKeyBytes ||
      static_cast<int64_t>(sizeof(head) + key_bytes + kFooterBytes) >
          r->file_bytes_) {
    return r->Damaged(kMagicBytes,
                      absl::StrCat("a key of ", key_bytes,
                                   " bytes in a file of ", r->file_bytes_));
  }
  std::string stored(key_bytes, '\0');
  if (std::fread(stored.data(), 1, key_bytes, file) != key_bytes) {
    return r->Damaged(sizeof(head), "truncated key");
  }
  if (stored != key) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " caches other inputs (its key differs from this dataset's)"));
  }
  r->first_chunk_ = static_cast<int64_t>(sizeof(head) + key_bytes);
  r->footer_ = r->file_bytes_ - static_cast<int64_t>(kFooterBytes);
  char foot[kFooterBytes];
  if (std::fseek(file, r->footer_, SEEK_SET) != 0 ||
      std::fread(foot, 1, kFooterBytes, file) != kFooterBytes ||
      std::memcmp(foot, kFooterMagic, kMagicBytes) != 0) {
    return r->Damaged(r->footer_, "no PSRTEND1 footer (incomplete file)");
  }
  const uint64_t examples = LoadU64(foot + kMagicBytes);
  const uint64_t chunks = LoadU64(foot + kMagicBytes + 8);
  const uint64_t body = static_cast<uint64_t>(r->footer_ - r->first_chunk_);
  // Each chunk takes at least its header and each example at least 12
  // bytes: counts beyond that are damage, not a reason to allocate.
  if (chunks > body / kChunkHeaderBytes || examples > body / 12 ||
      (chunks == 0) != (examples == 0)) {
    return r->Damaged(r->footer_,
                      absl::StrCat("footer counts ", examples, " examples in ",
                                   chunks, " chunks in ", body, " bytes"));
  }
  r->examples_ = static_cast<int64_t>(examples);
  r->chunks_ = static_cast<int64_t>(chunks);
  if (absl::Status s = r->Rewind(); !s.ok()) return s;
  if (verify_chunks) {
    while (true) {
      absl::StatusOr<bool> more = r->ReadChunk();
      if (!more.ok()) return more.status();
      if (!*more) break;
    }
  }
  if (absl::Status s = r->Rewind(); !s.ok()) return s;
  return r;
}

ExampleCacheReader::~ExampleCacheReader() { std::fclose(file_); }

absl::Status ExampleCacheReader::Damaged(int64_t offset,
                                         const std::string& what) const {
  return absl::DataLossError(absl::StrCat(
      "example cache ", path_, " is damaged at byte ", offset, ": ", what,
      "; delete it and the next run rebuilds it from the input files"));
}

absl::Status ExampleCacheReader::Rewind() {
  position_ = first_chunk_;
  chunks_read_ = examples_read_ = 0;
  chunk_examples_ = next_ = 0;
  if (std::fseek(file_, position_, SEEK_SET) != 0) {
    return Damaged(position_, std::strerror(errno));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> ExampleCacheReader::ReadChunk() {
  if (position_ == footer_) {
    if (chunks_read_ != chunks_ || examples_read_ != examples_) {
      return Damaged(
          footer_,
          absl::StrCat("the footer counts ", examples_, " examples in ",
                       chunks_, " chunks; the file holds ", examples_read_,
                       " in ", chunks_read_));
    }
    return false;
  }
  char head[kChunkHeaderBytes];
  if (footer_ - position_ < static_cast<int64_t>(kChunkHeaderBytes) ||
      std::fread(head, 1, kChunkHeaderBytes, file_) != kChunkHeaderBytes) {
    return Damaged(position_, "a chunk header past the end of the chunks");
  }
  const uint32_t n = LoadU32(head), ids = LoadU32(head + 4),
                 dense = LoadU32(head + 8), flags = LoadU32(head + 12),
                 crc = LoadU32(head + 16);
  if ((flags & ~(kIds32 | kValuesAreOne)) != 0) {
    return Damaged(position_, absl::StrCat("unknown chunk flags ", flags));
  }
  const uint32_t id_bytes = (flags & kIds32) ? 4 : 8;
  const uint32_t value_bytes = (flags & kValuesAreOne) ? 0 : 4;
  const uint64_t payload_bytes = uint64_t{n} * 12 +
                                 uint64_t{ids} * (id_bytes + value_bytes) +
                                 uint64_t{dense} * 4;
  const int64_t room = footer_ - position_ - kChunkHeaderBytes;
  if (n == 0 || n > kMaxChunkExamples ||
      payload_bytes > static_cast<uint64_t>(room)) {
    return Damaged(
        position_,
        absl::StrCat("a chunk of ", n, " examples, ", ids, " ids and ", dense,
                     " dense floats (", payload_bytes, " bytes) where ", room,
                     " bytes remain"));
  }
  payload_.resize(payload_bytes);
  if (std::fread(payload_.data(), 1, payload_bytes, file_) != payload_bytes) {
    return Damaged(position_, "truncated chunk");
  }
  if (Crc32c(payload_.data(), payload_.size()) != crc) {
    return Damaged(position_, "chunk checksum mismatch");
  }
  uint64_t id_sum = 0, dense_sum = 0;
  for (uint32_t i = 0; i < n; ++i) {
    id_sum += LoadU32(payload_.data() + 4 * (n + i));
    dense_sum += LoadU32(payload_.data() + 4 * (2 * n + i));
  }
  if (id_sum != ids || dense_sum != dense) {
    return Damaged(position_, "per-example counts disagree with the chunk's");
  }
  position_ += static_cast<int64_t>(kChunkHeaderBytes + payload_bytes);
  ++chunks_read_;
  examples_read_ += n;
  chunk_examples_ = n;
  chunk_ids_ = ids;
  chunk_id_bytes_ = id_bytes;
  chunk_value_bytes_ = value_bytes;
  next_ = 0;
  next_id_ = next_dense_ = 0;
  return true;
}

absl::StatusOr<bool> ExampleCacheReader::Next(Example* example) {
  if (next_ == chunk_examples_) {
    absl::StatusOr<bool> more = ReadChunk();
    if (!more.ok() || !*more) return more;
  }
  const uint32_t n = chunk_examples_;
  const char* p = payload_.data();
  const uint32_t id_count = LoadU32(p + 4 * (n + next_));
  const uint32_t dense_count = LoadU32(p + 4 * (2 * n + next_));
  std::memcpy(&example->label, p + 4 * next_, sizeof(float));
  const char* ids = p + 12 * size_t{n};
  const char* values = ids + size_t{chunk_id_bytes_} * chunk_ids_;
  const char* dense = values + size_t{chunk_value_bytes_} * chunk_ids_;
  example->ids.resize(id_count);
  example->dense.resize(dense_count);
  if (chunk_id_bytes_ == 8) {
    CopyBytes(example->ids.data(), ids + 8 * next_id_, 8 * size_t{id_count});
  } else {
    for (uint32_t i = 0; i < id_count; ++i) {
      example->ids[i] = LoadU32(ids + 4 * (next_id_ + i));
    }
  }
  if (chunk_value_bytes_ == 0) {
    example->values.assign(id_count, 1.0f);
  } else {
    example->values.resize(id_count);
    CopyBytes(example->values.data(), values + 4 * next_id_,
              4 * size_t{id_count});
  }
  CopyBytes(example->dense.data(), dense + 4 * next_dense_,
            4 * size_t{dense_count});
  next_id_ += id_count;
  next_dense_ += dense_count;
  ++next_;
  return true;
}

}  // namespace psrt

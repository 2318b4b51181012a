// The on-disk example cache of `--cache=DIR` (as tf.data's
// cache(filename)): one worker's parsed training examples, in the order its
// first epoch read them, written while that epoch trains and read back by
// later epochs -- and by later runs over the same inputs -- instead of the
// input files, so nothing is parsed twice and the data need not fit in
// memory.
//
// File layout (little-endian):
//   header  "PSRTEXC2", u32 key length, the key (what the examples were
//           parsed from: files with sizes and times, reader and sharding
//           options; a cache is used only by a dataset with the same key)
//   chunks  u32 examples n, u32 ids, u32 dense floats, u32 flags, u32
//           CRC-32C of the payload; payload: n labels (f32), n id counts
//           (u32), n dense counts (u32), the ids (i64, or u32 with flag 1:
//           all in [0, 2^32)), their values (f32; none with flag 2: all
//           1.0), the dense features (f32)
//   footer  "PSRTEND1", u64 examples, u64 chunks
// A writer writes `<path>.tmp-<pid>` and renames it to `path` only when the
// epoch is complete, so a cache file is never partial; a reader checks
// every size against the file before allocating and every chunk's CRC, and
// names the file and byte offset of any damage.
#ifndef PSRT_PS_WORKER_DATA_EXAMPLE_CACHE_FILE_H_
#define PSRT_PS_WORKER_DATA_EXAMPLE_CACHE_FILE_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "ps_worker/data/example.h"

namespace psrt {

// Where a dataset with `key` keeps its cache in `dir`: a name derived from
// a stable 64-bit hash of the key (the header holds the whole key, so a
// collision is detected, not trusted).
std::string ExampleCachePath(const std::string& dir, const std::string& key);

class ExampleCacheWriter {
 public:
  // Starts `path`'s temporary file (creating `path`'s directory if needed).
  static absl::StatusOr<std::unique_ptr<ExampleCacheWriter>> Create(
      const std::string& path, const std::string& key);
  // Removes the temporary file unless Finish succeeded.
  ~ExampleCacheWriter();
  ExampleCacheWriter(const ExampleCacheWriter&) = delete;
  ExampleCacheWriter& operator=(const ExampleCacheWriter&) = delete;

  // Appends an example (written a chunk at a time). An error (disk full)
  // leaves the cache unusable; the caller abandons it.
  absl::Status Add(const Example& example);
  // Writes the last chunk and the footer, flushes them to disk and renames
  // the file to its path.
  absl::Status Finish();

  int64_t examples() const { return examples_; }
  int64_t bytes() const { return bytes_; }
  const std::string& path() const { return path_; }

 private:
  ExampleCacheWriter(std::string path, std::string temp, std::FILE* file)
      : path_(std::move(path)), temp_(std::move(temp)), file_(file) {}
  absl::Status WriteChunk();
  absl::Status Write(const void* data, size_t n);

  const std::string path_, temp_;
  std::FILE* file_;
  bool finished_ = false;
  Batch chunk_;                      // examples not yet written
  std::vector<uint32_t> id_counts_;  // per example of chunk_
  std::vector<uint32_t> dense_counts_;
  int64_t examples_ = 0, chunks_ = 0, bytes_ = 0;
};

class ExampleCacheReader {
 public:
  // Opens a complete cache written for `key`. NOT_FOUND if there is none;
  // FAILED_PRECONDITION if it was written for another key; DATA_LOSS (with
  // the file and byte offset) if it is damaged. With `verify_chunks`, reads
  // every chunk and checks its CRC first (for a file an earlier run wrote).
  static absl::StatusOr<std::unique_ptr<ExampleCacheReader>> Open(
      const std::string& path, const std::string& key, bool verify_chunks);
  ~ExampleCacheReader();
  ExampleCacheReader(const ExampleCacheReader&) = delete;
  ExampleCacheReader& operator=(const ExampleCacheReader&) = delete;

  // The next example; false after the last. DATA_LOSS names the file and
  // the byte offset of a damaged chunk.
  absl::StatusOr<bool> Next(Example* example);
  // From the first example again.
  absl::Status Rewind();

  int64_t examples() const { return examples_; }
  int64_t bytes() const { return file_bytes_; }

 private:
  ExampleCacheReader(std::string path, std::FILE* file)
      : path_(std::move(path)), file_(file) {}
  // Reads the chunk at the file position into the buffers; false at the
  // footer.
  absl::StatusOr<bool> ReadChunk();
  absl::Status Damaged(int64_t offset, const std::string& what) const;

  const std::string path_;
  std::FILE* file_;
  int64_t file_bytes_ = 0;
  int64_t first_chunk_ = 0;  // offset of the first chunk
  int64_t footer_ = 0;       // offset of the footer
  int64_t examples_ = 0;     // per the footer
  int64_t chunks_ = 0;
  int64_t position_ = 0;  // offset of the next chunk
  int64_t chunks_read_ = 0, examples_read_ = 0;
  // The current chunk, and where the next example starts in it.
  std::string payload_;
  uint32_t chunk_examples_ = 0, chunk_ids_ = 0;
  uint32_t chunk_id_bytes_ = 8, chunk_value_bytes_ = 4;
  uint32_t next_ = 0;
  size_t next_id_ = 0, next_dense_ = 0;
};

}  // namespace psrt

#endif  // PSRT_PS_WORKER_DATA_EXAMPLE_CACHE_FILE_H_

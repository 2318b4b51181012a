// One shard's checkpoint data file (format in proto/ps.proto,
// ShardFileHeader): encoding from a live shard and verified decoding.
#ifndef PSRT_PS_SERVER_CHECKPOINT_SHARD_FILE_H_
#define PSRT_PS_SERVER_CHECKPOINT_SHARD_FILE_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/ps.pb.h"
#include "ps_server/shards/shard_store.h"
#include "storage/storage.h"

namespace psrt {

inline constexpr char kShardFileMagic[] = "PSRTSHD1";  // 8 bytes, no NUL

// Streams shard `shard` of `variable` (held on this PS) to `out` (not
// closed). Rows are copied out 256 KiB at a time, each chunk under the
// shard's lock, so pushes wait at most one chunk's copy and memory stays
// flat whatever the shard's size; every row is one consistent update
// state. Fills *header (its version is the shard's version when the copy
// finished), the file's CRC32C and its size.
absl::Status WriteShardFile(const LocalVariable& variable, int shard,
                            StorageWriter* out, ShardFileHeader* header,
                            uint32_t* crc, int64_t* bytes);

// The global row (or hash id) of row i of a file with `header` whose ids
// are not stored (derived from the shard's cut).
int64_t DerivedRowId(const ShardFileHeader& header, int64_t i);

// A decoded, verified data file; `stored_ids` and `rows` point into `data`.
struct ShardFileContents {
  std::string data;
  ShardFileHeader header;
  const int64_t* stored_ids = nullptr;  // hash shards only
  const float* rows = nullptr;

  int64_t num_rows() const { return header.num_rows(); }
  int64_t row_stride() const {
    return header.row_width() * (1 + header.num_slots());
  }
  // The global row (or hash id) of row i: stored for hash shards, derived
  // from the shard's cut otherwise.
  int64_t Id(int64_t i) const {
    return stored_ids != nullptr ? stored_ids[i] : DerivedRowId(header, i);
  }
};

// Verifies magic, CRC32C, header and sizes. Errors are DATA_LOSS naming
// `name` (the file) and what is wrong.
absl::StatusOr<ShardFileContents> DecodeShardFile(std::string data,
                                                  absl::string_view name);

// Rows [first, first + num_rows) of a streamed shard file.
struct ShardFileChunk {
  int64_t first = 0;
  int64_t num_rows = 0;
  const int64_t* ids = nullptr;  // num_rows ids (stored or derived)
  const float* rows = nullptr;   // num_rows * row_stride floats
  int64_t bytes = 0;             // of the file read for this chunk
};

// Streams the shard file `file` of a checkpoint through buffers of about
// `chunk_bytes`, with ranged reads (Storage::NewReader), instead of
// holding it whole: `on_header` gets the header (from the file's end,
// checked for sanity and against the manifest's size) before any row,
// `on_chunk` every chunk in order. The CRC32C (the file's own and the
// manifest's) can only be checked at the end, after every chunk was handed
// over: on any error the caller discards what it built from them. Errors
// are DATA_LOSS naming the file; a storage error is returned as it is.
absl::Status StreamShardFile(
    Storage& checkpoint, const CheckpointFile& file, int format_version,
    int64_t chunk_bytes,
    const std::function<absl::Status(const ShardFileHeader&)>& on_header,
    const std::function<absl::Status(const ShardFileChunk&)>& on_chunk);

// Reads the shard file `file` of a checkpoint from `checkpoint` (storage
// rooted at the checkpoint) and checks it against what the manifest (of
// format `format_version`) recorded: its size and CRC32C, then decodes it.
// DATA_LOSS names the file; a storage error is returned as it is.
absl::StatusOr<ShardFileContents> ReadShardFile(Storage& checkpoint,
                                                const CheckpointFile& file,
                                                int format_version);

// The CRC32C a file ends with (of every byte before it).
uint32_t ShardFileCrc(absl::string_view data);
// The CRC32C of the whole file (what a manifest of format 2 records), from
// its trailer: Crc32cExtend(trailer CRC, the trailer's 4 bytes). Equals
// Crc32c(data) whenever the trailer is right.
uint32_t ShardFileWholeCrc(absl::string_view data);

// A variable name as a file name: anything outside [A-Za-z0-9._-]
// percent-encoded ('/' -> %2F).
std::string VariableFileStem(absl::string_view variable);

// The file name of a shard inside a checkpoint: VariableFileStem plus the
// shard number.
std::string ShardFileName(absl::string_view variable, int shard,
                          int num_shards);

}  // namespace psrt

#endif  // PSRT_PS_SERVER_CHECKPOINT_SHARD_FILE_H_

#include "ps_server/checkpoint/shard_file.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/crc32c.h"

namespace psrt {
namespace {

constexpr size_t kMagicBytes = 8;
// Rows copied per lock acquisition: about 256 KiB (tens of microseconds
// of memcpy: what a push may have to wait).
constexpr int64_t kChunkBytes = 256 << 10;

void PutU32(std::string* out, uint32_t v) {
  char b[4];
  std::memcpy(b, &v, 4);
  out->append(b, 4);
}

uint32_t GetU32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

std::string VariableFileStem(absl::string_view variable) {
  std::string out;
  for (unsigned char c : variable) {
    if (absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&out, "%%%02X", c);
    }
  }
  return out;
}

std::string ShardFileName(absl::string_view variable, int shard,
                          int num_shards) {
  return absl::StrFormat("%s.shard-%05d-of-%05d", VariableFileStem(variable),
                         shard, num_shards);
}

absl::Status WriteShardFile(const LocalVariable& variable, int shard,
                            StorageWriter* out, ShardFileHeader* header_out,
                            uint32_t* crc_out, int64_t* bytes_out) {
  const VariableLayout& layout = *variable.layout;
  ShardFileHeader& header = *header_out;
  header.Clear();
  header.set_variable(layout.spec.name());
  header.set_shard(shard);
  header.set_num_shards(layout.num_shards());
  header.set_kind(layout.kind());
  header.set_row_width(layout.row_width);
  header.set_num_slots(layout.num_slots);
  header.set_routing(layout.routing());
  header.set_row_begin(layout.shards[shard].row_begin);
  const int64_t stride = layout.row_width * (1 + layout.num_slots);
  const int64_t chunk_rows =
      std::max<int64_t>(1, kChunkBytes / (stride * sizeof(float)));
  uint32_t crc = 0;
  int64_t bytes = 0;
  auto emit = [&](const void* data, size_t n) {
    crc = Crc32cExtend(crc, data, n);
    bytes += static_cast<int64_t>(n);
    return out->Append(absl::string_view(static_cast<const char*>(data), n));
  };
  if (absl::Status s = emit(kShardFileMagic, kMagicBytes); !s.ok()) return s;

  const Shard& source = variable.shard(shard);
  // Shards whose rows are not a fixed range (hash shards): the rows that
  // exist now, in creation order, ids first (a row's id never changes;
  // rows created later are not included).
  const bool explicit_ids = source.exports_ids();
  const int64_t rows = source.num_rows();
  header.set_num_rows(rows);
  header.set_explicit_ids(explicit_ids);
  int64_t version = 0;
  if (explicit_ids) {
    std::vector<int64_t> ids(
        std::max<int64_t>(1, std::min(rows, chunk_rows * 4)));
    for (int64_t first = 0; first < rows;) {
      const int64_t want = std::min<int64_t>(ids.size(), rows - first);
      const int64_t n =
          source.ExportRows(first, want, ids.data(), nullptr, &version);
      if (absl::Status s = emit(ids.data(), n * sizeof(int64_t)); !s.ok())
        return s;
      first += n;
    }
  }
  std::vector<float> chunk(std::min(rows, chunk_rows) * stride);
  for (int64_t first = 0; first < rows; first += chunk_rows) {
    const int64_t n = std::min(chunk_rows, rows - first);
    source.ExportRows(first, n, nullptr, chunk.data(), &version);
    if (absl::Status s = emit(chunk.data(), n * stride * sizeof(float));
        !s.ok()) {
      return s;
    }
  }
  header.set_version(version);
  std::string trailer = header.SerializeAsString();
  PutU32(&trailer, static_cast<uint32_t>(trailer.size()));
  if (absl::Status s = emit(trailer.data(), trailer.size()); !s.ok()) return s;
  std::string crc_bytes;
  PutU32(&crc_bytes, crc);
  if (absl::Status s = out->Append(crc_bytes); !s.ok()) return s;
  // The manifest records the CRC32C of the whole file, as standard tools
  // compute it (rhash --crc32c, gsutil hash -c, S3's x-amz-checksum-crc32c).
  *crc_out = Crc32cExtend(crc, crc_bytes.data(), crc_bytes.size());
  *bytes_out = bytes + 4;
  return absl::OkStatus();
}

uint32_t ShardFileCrc(absl::string_view data) {
  return data.size() < 4 ? 0 : GetU32(data.data() + data.size() - 4);
}

uint32_t ShardFileWholeCrc(absl::string_view data) {
  if (data.size() < 4) return Crc32c(data.data(), data.size());
  return Crc32cExtend(ShardFileCrc(data), data.data() + data.size() - 4, 4);
}

absl::StatusOr<ShardFileContents> DecodeShardFile(std::string data,
                                                  absl::string_view name) {
  auto loss = [&](const std::string& what) {
    return absl::DataLossError(
        absl::StrCat("checkpoint file ", name, " is corrupt: ", what));
  };
  if (data.size() < kMagicBytes + 8) {
    return loss(absl::StrCat("only ", data.size(), " bytes"));
  }
  if (std::memcmp(data.data(), kShardFileMagic, kMagicBytes) != 0) {
    return loss("not a psrt shard file (bad magic)");
  }
  const uint32_t stored = GetU32(data.data() + data.size() - 4);
  const uint32_t actual = Crc32c(data.data(), data.size() - 4);
  if (stored != actual) {
    return loss(absl::StrFormat("CRC32C mismatch (stored %08x, computed %08x)",
                                stored, actual));
  }
  const uint32_t header_bytes = GetU32(data.data() + data.size() - 8);
  if (header_bytes > data.size() - kMagicBytes - 8) {
    return loss(absl::StrCat("header length ", header_bytes, " too large"));
  }
  const size_t header_at = data.size() - 8 - header_bytes;
  ShardFileContents c;
  if (!c.header.ParseFromArray(data.data() + header_at,
                               static_cast<int>(header_bytes))) {
    return loss("header does not parse");
  }
  const ShardFileHeader& h = c.header;
  if (h.row_width() <= 0 || h.num_rows() < 0 || h.num_slots() < 0 ||
      h.num_slots() > 2 || h.num_shards() <= 0 || h.shard() < 0 ||
      h.shard() >= h.num_shards()) {
    return loss(absl::StrCat("bad header {", h.ShortDebugString(), "}"));
  }
  const size_t id_bytes = h.explicit_ids() ? h.num_rows() * sizeof(int64_t) : 0;
  const size_t row_bytes = h.num_rows() * c.row_stride() * sizeof(float);
  if (kMagicBytes + id_bytes + row_bytes != header_at) {
    return loss(absl::StrCat("header says ", h.num_rows(), " rows (",
                             id_bytes + row_bytes, " bytes) but the body has ",
                             header_at - kMagicBytes));
  }
  c.data = std::move(data);
  // 8-aligned: the buffer is heap-allocated and the ids start at byte 8.
  if (h.explicit_ids()) {
    c.stored_ids =
        reinterpret_cast<const int64_t*>(c.data.data() + kMagicBytes);
  }
  c.rows =
      reinterpret_cast<const float*>(c.data.data() + kMagicBytes + id_bytes);
  return c;
}

absl::StatusOr<ShardFileContents> ReadShardFile(Storage& checkpoint,
                                                const CheckpointFile& file,
                                                int format_version) {
  auto data = checkpoint.Read(file.path());
  if (!data.ok()) return data.status();
  const std::string name = checkpoint.Describe(file.path());
  if (static_cast<int64_t>(data->size()) != file.bytes()) {
    return absl::DataLossError(
        absl::StrCat("checkpoint file ", name, " has ", data->size(),
                     " bytes but the manifest recorded ", file.bytes()));
  }
  // Format 1 recorded the trailer's CRC (of every byte but the last 4);
  // format 2 the whole file's, as standard tools compute it.
  const uint32_t recorded_as =
      format_version >= 2 ? ShardFileWholeCrc(*data) : ShardFileCrc(*data);
  if (recorded_as != file.crc32c()) {
    return absl::DataLossError(
        absl::StrCat("checkpoint file ", name,
                     " does not carry the CRC32C the manifest recorded"));
  }
  return DecodeShardFile(*std::move(data), name);
}

}  // namespace psrt

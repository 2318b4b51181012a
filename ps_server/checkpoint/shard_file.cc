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

// A shard that exported fewer rows than it said it holds (its row count
// and its rows disagree): the file fails rather than holding garbage.
absl::Status ShortExport(const VariableLayout& layout, int shard, int64_t first,
                         int64_t want, int64_t got) {
  return absl::InternalError(absl::StrCat(
      "checkpoint of '", layout.spec.name(), "' shard ", shard, ": rows [",
      first, ", ", first + want, ") exported ", got, " rows, not ", want));
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
  // Ids and rows are read in separate passes by position: no eviction may
  // move a row in between (a file never holds half-evicted rows).
  source.PinRows(true);
  struct Unpin {
    const Shard& shard;
    ~Unpin() { shard.PinRows(false); }
  } unpin{source};
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
      if (n != want) return ShortExport(layout, shard, first, want, n);
      if (absl::Status s = emit(ids.data(), n * sizeof(int64_t)); !s.ok())
        return s;
      first += n;
    }
  }
  std::vector<float> chunk(std::min(rows, chunk_rows) * stride);
  for (int64_t first = 0; first < rows; first += chunk_rows) {
    const int64_t n = std::min(chunk_rows, rows - first);
    const int64_t got =
        source.ExportRows(first, n, nullptr, chunk.data(), &version);
    if (got != n) return ShortExport(layout, shard, first, n, got);
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

int64_t DerivedRowId(const ShardFileHeader& header, int64_t i) {
  return header.routing() == PartitionSpec::MOD
             ? i * header.num_shards() + header.shard()
             : header.row_begin() + i;
}

namespace {

absl::Status Corrupt(absl::string_view name, absl::string_view what) {
  return absl::DataLossError(
      absl::StrCat("checkpoint file ", name, " is corrupt: ", what));
}

// Checks a parsed header's fields, and that its rows (and ids) fill the
// body exactly: `body_bytes` between the magic and the header.
absl::Status CheckHeader(const ShardFileHeader& h, size_t body_bytes,
                         absl::string_view name) {
  if (h.row_width() <= 0 || h.num_rows() < 0 || h.num_slots() < 0 ||
      h.num_slots() > 2 || h.num_shards() <= 0 || h.shard() < 0 ||
      h.shard() >= h.num_shards()) {
    return Corrupt(name,
                   absl::StrCat("bad header {", h.ShortDebugString(), "}"));
  }
  // Bounded before multiplying: no count can overflow what follows.
  const uint64_t stride_bytes =
      static_cast<uint64_t>(h.row_width()) * (1 + h.num_slots()) * 4;
  const uint64_t row_bytes = stride_bytes + (h.explicit_ids() ? 8 : 0);
  // (A shard with no rows yet, of a hash table, has an empty body.)
  if ((body_bytes > 0 && static_cast<uint64_t>(h.row_width()) > body_bytes) ||
      static_cast<uint64_t>(h.num_rows()) > body_bytes / row_bytes ||
      static_cast<uint64_t>(h.num_rows()) * row_bytes != body_bytes) {
    return Corrupt(
        name, absl::StrCat("header says ", h.num_rows(), " rows of ", row_bytes,
                           " bytes but the body has ", body_bytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ShardFileContents> DecodeShardFile(std::string data,
                                                  absl::string_view name) {
  auto loss = [&](const std::string& what) { return Corrupt(name, what); };
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
  if (absl::Status s = CheckHeader(h, header_at - kMagicBytes, name); !s.ok()) {
    return s;
  }
  const size_t id_bytes = h.explicit_ids() ? h.num_rows() * sizeof(int64_t) : 0;
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

absl::Status StreamShardFile(
    Storage& checkpoint, const CheckpointFile& file, int format_version,
    int64_t chunk_bytes,
    const std::function<absl::Status(const ShardFileHeader&)>& on_header,
    const std::function<absl::Status(const ShardFileChunk&)>& on_chunk) {
  const std::string name = checkpoint.Describe(file.path());
  auto reader = checkpoint.NewReader(file.path());
  if (!reader.ok()) return reader.status();
  const int64_t size = file.bytes();
  if (size < static_cast<int64_t>(kMagicBytes) + 8) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint file ", name, ": the manifest recorded ", size, " bytes"));
  }
  // The trailer (header length, CRC) and one byte more: the object must
  // end exactly where the manifest says.
  std::string tail;
  if (absl::Status s = (*reader)->ReadAt(size - 8, 9, &tail); !s.ok()) return s;
  if (tail.size() != 8) {
    return absl::DataLossError(
        absl::StrCat("checkpoint file ", name, " is ",
                     tail.size() < 8 ? "shorter" : "longer", " than the ", size,
                     " bytes the manifest recorded"));
  }
  const uint32_t header_bytes = GetU32(tail.data());
  const uint32_t stored_crc = GetU32(tail.data() + 4);
  if (header_bytes > size - kMagicBytes - 8) {
    return Corrupt(name,
                   absl::StrCat("header length ", header_bytes, " too large"));
  }
  const int64_t header_at = size - 8 - header_bytes;
  std::string header_data;
  if (absl::Status s =
          (*reader)->ReadAt(header_at, header_bytes + 4, &header_data);
      !s.ok()) {
    return s;
  }
  ShardFileHeader header;
  if (header_data.size() != header_bytes + 4 ||
      !header.ParseFromArray(header_data.data(),
                             static_cast<int>(header_bytes))) {
    return Corrupt(name, "header does not parse");
  }
  if (absl::Status s = CheckHeader(header, header_at - kMagicBytes, name);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = on_header(header); !s.ok()) return s;

  std::string magic;
  if (absl::Status s = (*reader)->ReadAt(0, kMagicBytes, &magic); !s.ok()) {
    return s;
  }
  if (magic.size() != kMagicBytes ||
      std::memcmp(magic.data(), kShardFileMagic, kMagicBytes) != 0) {
    return Corrupt(name, "not a psrt shard file (bad magic)");
  }
  // The ids (hash shards) and the rows are two regions read side by side;
  // their CRCs are combined with the magic's and the header's at the end.
  const int64_t stride_bytes = header.row_width() * (1 + header.num_slots()) *
                               static_cast<int64_t>(sizeof(float));
  const int64_t rows = header.num_rows();
  const int64_t ids_at = kMagicBytes;
  const int64_t id_bytes = header.explicit_ids() ? rows * 8 : 0;
  const int64_t rows_at = ids_at + id_bytes;
  const int64_t chunk_rows = std::max<int64_t>(
      1, chunk_bytes / (stride_bytes + (header.explicit_ids() ? 8 : 0)));
  uint32_t crc_front = Crc32c(magic.data(), magic.size());  // magic + ids
  uint32_t crc_rows = 0;
  std::string id_data, row_data;
  std::vector<int64_t> derived;
  for (int64_t first = 0; first < rows; first += chunk_rows) {
    const int64_t n = std::min(chunk_rows, rows - first);
    ShardFileChunk chunk;
    chunk.first = first;
    chunk.num_rows = n;
    if (header.explicit_ids()) {
      if (absl::Status s =
              (*reader)->ReadAt(ids_at + first * 8, n * 8, &id_data);
          !s.ok()) {
        return s;
      }
      if (static_cast<int64_t>(id_data.size()) != n * 8) {
        return Corrupt(name, "ends inside its ids");
      }
      crc_front = Crc32cExtend(crc_front, id_data.data(), id_data.size());
      // 8-aligned: the string's buffer comes from the heap.
      chunk.ids = reinterpret_cast<const int64_t*>(id_data.data());
    } else {
      derived.resize(n);
      for (int64_t i = 0; i < n; ++i) {
        derived[i] = DerivedRowId(header, first + i);
      }
      chunk.ids = derived.data();
    }
    if (absl::Status s = (*reader)->ReadAt(rows_at + first * stride_bytes,
                                           n * stride_bytes, &row_data);
        !s.ok()) {
      return s;
    }
    if (static_cast<int64_t>(row_data.size()) != n * stride_bytes) {
      return Corrupt(name, "ends inside its rows");
    }
    crc_rows = Crc32cExtend(crc_rows, row_data.data(), row_data.size());
    chunk.rows = reinterpret_cast<const float*>(row_data.data());
    chunk.bytes = id_data.size() + row_data.size();
    if (absl::Status s = on_chunk(chunk); !s.ok()) return s;
  }
  const uint32_t crc_trailer = Crc32c(header_data.data(), header_data.size());
  const uint32_t computed =
      Crc32cCombine(Crc32cCombine(crc_front, crc_rows, rows * stride_bytes),
                    crc_trailer, header_data.size());
  if (computed != stored_crc) {
    return Corrupt(name, absl::StrFormat("CRC32C mismatch (stored %08x, "
                                         "computed %08x)",
                                         stored_crc, computed));
  }
  const uint32_t recorded_as = format_version >= 2
                                   ? Crc32cExtend(computed, tail.data() + 4, 4)
                                   : computed;
  if (recorded_as != file.crc32c()) {
    return absl::DataLossError(
        absl::StrCat("checkpoint file ", name,
                     " does not carry the CRC32C the manifest recorded"));
  }
  return absl::OkStatus();
}

}  // namespace psrt

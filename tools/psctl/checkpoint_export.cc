#include "tools/psctl/checkpoint_export.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ps_server/checkpoint/shard_file.h"

namespace psrt {
namespace {

// A .npy file (format 1.0): magic, version, header length, a Python dict
// literal padded with spaces to a multiple of 64 bytes, then the data in C
// order.
absl::Status WriteNpy(const std::string& path, const char* descr,
                      const std::vector<int64_t>& shape, const void* data,
                      size_t bytes) {
  // (n,) for 1-D, (n, m) otherwise, as numpy writes them.
  std::string dims = absl::StrJoin(shape, ", ");
  if (shape.size() == 1) dims.push_back(',');
  std::string header =
      absl::StrCat("{'descr': '", descr,
                   "', 'fortran_order': False, 'shape': (", dims, "), }");
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const uint16_t length = static_cast<uint16_t>(header.size());
  out.write("\x93NUMPY\x01\x00", 8);
  out.put(static_cast<char>(length & 0xff));
  out.put(static_cast<char>(length >> 8));
  out << header;
  out.write(static_cast<const char*>(data),
            static_cast<std::streamsize>(bytes));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out + "\"";
}

struct Exported {
  std::string json;  // its index.json entry
  int64_t rows = 0;
  int64_t bytes = 0;
};

absl::StatusOr<Exported> ExportVariable(Storage& checkpoint,
                                        const CheckpointManifest& manifest,
                                        const VariableSpec& spec,
                                        const std::string& out_dir) {
  const bool hashed = spec.kind() == HASH_EMBEDDING;
  // A scalar (shape []) is one row of one value, as the PS keeps it.
  const bool scalar = spec.shape_size() == 0;
  const int64_t width =
      scalar ? 1
             : std::accumulate(spec.shape().begin() + 1, spec.shape().end(),
                               int64_t{1}, std::multiplies<int64_t>());
  const int64_t rows = scalar ? 1 : spec.shape(0);
  // Sizes from the manifest are checked against each other before any
  // memory is sized by them: the files of a dense or embedding variable
  // hold its rows exactly once.
  int64_t listed_rows = 0;
  for (const CheckpointFile& f : manifest.files()) {
    if (f.variable() == spec.name()) listed_rows += f.num_rows();
  }
  if (!hashed && (width <= 0 || listed_rows != rows)) {
    return absl::DataLossError(absl::StrCat("the manifest's files of '",
                                            spec.name(), "' hold ", listed_rows,
                                            " rows but its shape has ", rows));
  }
  std::vector<float> values;
  std::vector<std::pair<int64_t, std::vector<float>>> by_id;  // hash only
  if (!hashed) values.assign(rows * width, 0.0f);
  int files = 0;
  for (const CheckpointFile& f : manifest.files()) {
    if (f.variable() != spec.name()) continue;
    ++files;
    auto shard = ReadShardFile(checkpoint, f, manifest.format_version());
    if (!shard.ok()) return shard.status();
    if (shard->header.row_width() != width) {
      return absl::DataLossError(
          absl::StrCat(f.path(), " holds rows of ", shard->header.row_width(),
                       " floats but '", spec.name(), "' has rows of ", width));
    }
    for (int64_t i = 0; i < shard->num_rows(); ++i) {
      const float* row = shard->rows + i * shard->row_stride();
      const int64_t id = shard->Id(i);
      if (hashed) {
        by_id.emplace_back(id, std::vector<float>(row, row + width));
        continue;
      }
      if (id < 0 || id >= rows) {
        return absl::DataLossError(absl::StrCat(f.path(), " holds row ", id,
                                                " of '", spec.name(),
                                                "', which has ", rows));
      }
      std::copy(row, row + width, values.begin() + id * width);
    }
  }
  if (files == 0) {
    return absl::DataLossError(
        absl::StrCat("the manifest lists no files of '", spec.name(), "'"));
  }
  const std::string stem = VariableFileStem(spec.name());
  Exported e;
  std::vector<int64_t> shape(spec.shape().begin(), spec.shape().end());
  std::string ids_entry;
  if (hashed) {
    std::sort(by_id.begin(), by_id.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<int64_t> ids;
    for (auto& [id, row] : by_id) {
      ids.push_back(id);
      values.insert(values.end(), row.begin(), row.end());
    }
    shape = {static_cast<int64_t>(ids.size()), width};
    if (absl::Status s = WriteNpy(out_dir + "/" + stem + ".ids.npy", "<i8",
                                  {static_cast<int64_t>(ids.size())},
                                  ids.data(), ids.size() * sizeof(int64_t));
        !s.ok()) {
      return s;
    }
    e.bytes += static_cast<int64_t>(ids.size() * sizeof(int64_t));
    ids_entry = absl::StrCat(", \"ids_file\": ", JsonString(stem + ".ids.npy"));
  }
  if (absl::Status s = WriteNpy(out_dir + "/" + stem + ".npy", "<f4", shape,
                                values.data(), values.size() * sizeof(float));
      !s.ok()) {
    return s;
  }
  e.rows = shape.empty() ? 1 : shape[0];
  e.bytes += static_cast<int64_t>(values.size() * sizeof(float));
  e.json =
      absl::StrCat("{\"name\": ", JsonString(spec.name()),
                   ", \"kind\": ", JsonString(VariableKind_Name(spec.kind())),
                   ", \"shape\": [", absl::StrJoin(spec.shape(), ", "),
                   "], \"rows\": ", e.rows,
                   ", \"file\": ", JsonString(stem + ".npy"), ids_entry, "}");
  return e;
}

}  // namespace

absl::StatusOr<ExportSummary> ExportCheckpoint(
    Storage& checkpoint, const CheckpointManifest& manifest,
    const std::string& out_dir) {
  std::error_code error;
  std::filesystem::create_directories(out_dir, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot create ", out_dir, ": ", error.message()));
  }
  ExportSummary summary;
  std::vector<std::string> entries;
  for (const VariableSpec& spec : manifest.variables()) {
    auto e = ExportVariable(checkpoint, manifest, spec, out_dir);
    if (!e.ok()) return e.status();
    entries.push_back(e->json);
    ++summary.variables;
    summary.rows += e->rows;
    summary.bytes += e->bytes;
  }
  const std::string index = absl::StrCat(
      "{\"checkpoint\": ", JsonString(manifest.name()),
      ", \"global_step\": ", manifest.global_step(), ", \"variables\": [\n  ",
      absl::StrJoin(entries, ",\n  "), "\n]}\n");
  std::ofstream out(out_dir + "/index.json", std::ios::trunc);
  out << index;
  out.close();
  if (!out) return absl::InternalError("cannot write index.json");
  return summary;
}

}  // namespace psrt

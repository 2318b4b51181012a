#include "ps_server/checkpoint/checkpoint_restorer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "partitioner/variable_spec.h"
#include "ps_server/checkpoint/checkpoint_catalog.h"
#include "ps_server/checkpoint/shard_file.h"
#include "util/crc32c.h"

namespace psrt {
namespace {

// Rows whose ids are materialized at once while restoring a file.
constexpr int64_t kRestoreChunkRows = 65536;

int64_t RowWidthOf(const VariableSpec& spec) {
  int64_t w = 1;
  for (int i = 1; i < spec.shape_size(); ++i) w *= spec.shape(i);
  return w;
}

// Why `saved` cannot be restored into `now`, or "" if it can.
std::string Incompatibility(const VariableSpec& saved,
                            const VariableSpec& now) {
  if (saved.kind() != now.kind()) return "kind differs";
  if (saved.optimizer().kind() != now.optimizer().kind()) {
    return "optimizer differs (its slots would not mean the same)";
  }
  if (now.kind() == HASH_EMBEDDING) {
    if (RowWidthOf(saved) != RowWidthOf(now)) return "row width differs";
  } else if (std::vector<int64_t>(saved.shape().begin(), saved.shape().end()) !=
             std::vector<int64_t>(now.shape().begin(), now.shape().end())) {
    return "shape differs";
  }
  return "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<CheckpointRestorer>> CheckpointRestorer::Open(
    const std::string& uri, const StorageOpener& open_storage) {
  auto storage = open_storage(uri);
  if (!storage.ok()) return storage.status();
  auto manifest = ReadManifest(**storage, "");
  if (!manifest.ok()) return manifest.status();
  std::unique_ptr<CheckpointRestorer> r(new CheckpointRestorer);
  r->uri_ = uri;
  r->storage_ = std::move(*storage);
  r->manifest_ = *std::move(manifest);
  for (const VariableSpec& spec : r->manifest_.variables()) {
    r->specs_[spec.name()] = &spec;
  }
  return r;
}

std::vector<const CheckpointFile*> CheckpointRestorer::FilesFor(
    const LocalVariable& variable, const VariableSpec& saved) const {
  const VariableLayout& layout = *variable.layout;
  const bool both_div = layout.kind() != HASH_EMBEDDING &&
                        layout.routing() == PartitionSpec::DIV &&
                        saved.partition().routing() == PartitionSpec::DIV;
  std::vector<const CheckpointFile*> files;
  int saved_shards = 0;
  for (const CheckpointFile& f : manifest_.files()) {
    if (f.variable() == variable.name()) ++saved_shards;
  }
  for (const CheckpointFile& f : manifest_.files()) {
    if (f.variable() != variable.name()) continue;
    bool relevant = false;
    if (both_div) {
      for (int s = 0; s < layout.num_shards() && !relevant; ++s) {
        const ShardLayout& sl = layout.shards[s];
        relevant = variable.Holds(s) &&
                   f.row_begin() < sl.row_begin + sl.num_rows &&
                   sl.row_begin < f.row_begin() + f.num_rows();
      }
    } else if (saved_shards == layout.num_shards() &&
               saved.partition().routing() == layout.routing()) {
      relevant = variable.Holds(f.shard());
    } else {
      relevant = true;  // rows of any saved shard may route here
    }
    if (relevant) files.push_back(&f);
  }
  return files;
}

absl::StatusOr<ShardFileContents> CheckpointRestorer::ReadVerified(
    const CheckpointFile& file, const LocalVariable& variable) const {
  const VariableLayout& layout = *variable.layout;
  auto contents = ReadShardFile(*storage_, file, manifest_.format_version());
  if (!contents.ok() && !absl::IsDataLoss(contents.status())) {
    return absl::Status(contents.status().code(),
                        absl::StrCat("restore of '", variable.name(),
                                     "': ", contents.status().message()));
  }
  if (!contents.ok()) return contents.status();
  const std::string name = storage_->Describe(file.path());
  const ShardFileHeader& h = contents->header;
  if (h.variable() != variable.name() || h.row_width() != layout.row_width ||
      h.num_slots() != layout.num_slots) {
    return absl::DataLossError(
        absl::StrCat("checkpoint file ", name, " holds {", h.ShortDebugString(),
                     "}, not '", variable.name(), "' with row width ",
                     layout.row_width, " and ", layout.num_slots, " slots"));
  }
  return contents;
}

absl::Status CheckpointRestorer::Import(const ShardFileContents& contents,
                                        const std::string& name,
                                        const LocalVariable& variable,
                                        std::vector<int64_t>* versions,
                                        int64_t* restored_rows) const {
  const VariableLayout& layout = *variable.layout;
  const int64_t stride = contents.row_stride();
  // Import runs of consecutive rows bound for the same local shard, a
  // bounded chunk of ids at a time.
  const int64_t n = contents.num_rows();
  std::vector<int64_t> ids;
  for (int64_t first = 0; first < n; first += kRestoreChunkRows) {
    const int64_t count = std::min(kRestoreChunkRows, n - first);
    ids.resize(count);
    for (int64_t i = 0; i < count; ++i) {
      ids[i] = contents.Id(first + i);
      if (layout.kind() != HASH_EMBEDDING &&
          (ids[i] < 0 || ids[i] >= layout.rows)) {
        return absl::DataLossError(
            absl::StrCat("checkpoint file ", name, " holds row ", ids[i],
                         " outside [0, ", layout.rows, ")"));
      }
    }
    for (int64_t i = 0; i < count;) {
      const int shard = layout.ShardOf(ids[i]);
      int64_t end = i + 1;
      while (end < count && layout.ShardOf(ids[end]) == shard) ++end;
      if (variable.Holds(shard)) {
        const float* rows = contents.rows + (first + i) * stride;
        absl::Span<const int64_t> run(ids.data() + i, end - i);
        if (absl::Status s = variable.shard(shard).ImportRows(run, rows);
            !s.ok()) {
          return absl::Status(
              s.code(), absl::StrCat("restore from ", name, ": ", s.message()));
        }
        (*versions)[shard] =
            std::max((*versions)[shard], contents.header.version());
        *restored_rows += end - i;
      }
      i = end;
    }
  }
  return absl::OkStatus();
}

absl::Status CheckpointRestorer::Fill(const LocalVariable& variable) {
  const VariableLayout& layout = *variable.layout;
  auto saved_it = specs_.find(variable.name());
  if (saved_it == specs_.end()) {
    LOG(INFO) << "restore: '" << variable.name() << "' is not in " << uri_
              << "; it starts from its initializer";
    return absl::OkStatus();
  }
  const VariableSpec& saved = *saved_it->second;
  if (std::string why = Incompatibility(saved, layout.spec); !why.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot restore '", variable.name(), "' from ", uri_, ": ",
                     why, ": saved {", DescribeSpec(saved), "}, requested {",
                     DescribeSpec(layout.spec), "}"));
  }
  bool holds_any = false;
  for (int s = 0; s < layout.num_shards(); ++s) holds_any |= variable.Holds(s);
  if (!holds_any) return absl::OkStatus();

  const std::vector<const CheckpointFile*> files = FilesFor(variable, saved);
  std::vector<int64_t> versions(layout.num_shards(), 0);
  int64_t restored_rows = 0;
  for (const CheckpointFile* f : files) {
    auto contents = ReadVerified(*f, variable);
    if (!contents.ok()) return contents.status();
    if (absl::Status s = Import(*contents, storage_->Describe(f->path()),
                                variable, &versions, &restored_rows);
        !s.ok()) {
      return s;
    }
  }
  for (int s = 0; s < layout.num_shards(); ++s) {
    if (variable.Holds(s)) variable.shard(s).RestoreVersion(versions[s]);
  }
  LOG(INFO) << "restore: '" << variable.name() << "' " << restored_rows
            << " rows from " << files.size() << " file(s) of " << uri_;
  return absl::OkStatus();
}

}  // namespace psrt

#include "ps_server/checkpoint/checkpoint_restorer.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "glog/logging.h"
#include "partitioner/variable_spec.h"
#include "ps_server/checkpoint/checkpoint_catalog.h"
#include "ps_server/checkpoint/shard_file.h"
#include "util/crc32c.h"

namespace psrt {
namespace {

// Files restored at once, each read in ranges of the storage's
// preferred_read_bytes (2 MiB from files, 8 MiB from S3) into one buffer
// of its own: at most 4 x 8 MiB beyond the shards themselves.
constexpr size_t kRestoreFileThreads = 4;

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

absl::Status CheckpointRestorer::RestoreFile(
    const CheckpointFile& file, const LocalVariable& variable,
    const std::atomic<bool>& cancelled, const std::atomic<bool>& sibling_failed,
    TransferProgress* progress, std::vector<int64_t>* versions,
    std::vector<int64_t>* restored_rows) const {
  const VariableLayout& layout = *variable.layout;
  const std::string name = storage_->Describe(file.path());
  int64_t version = 0;
  auto check_header = [&](const ShardFileHeader& h) {
    if (h.variable() != variable.name() || h.row_width() != layout.row_width ||
        h.num_slots() != layout.num_slots) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint file ", name, " holds {", h.ShortDebugString(),
          "}, not '", variable.name(), "' with row width ", layout.row_width,
          " and ", layout.num_slots, " slots"));
    }
    version = h.version();
    return absl::OkStatus();
  };
  auto import = [&](const ShardFileChunk& chunk) {
    if (cancelled || sibling_failed) {
      return absl::CancelledError(
          absl::StrCat("restore of '", variable.name(), "' was cancelled"));
    }
    absl::Status s =
        Import(chunk, name, variable, version, versions, restored_rows);
    progress->Add(chunk.bytes);
    return s;
  };
  absl::Status s =
      StreamShardFile(*storage_, file, manifest_.format_version(),
                      storage_->preferred_read_bytes(), check_header, import);
  if (!s.ok() && !absl::IsDataLoss(s)) {
    return absl::Status(s.code(), absl::StrCat("restore of '", variable.name(),
                                               "': ", s.message()));
  }
  return s;
}

absl::Status CheckpointRestorer::Import(
    const ShardFileChunk& chunk, const std::string& name,
    const LocalVariable& variable, int64_t version,
    std::vector<int64_t>* versions, std::vector<int64_t>* restored_rows) const {
  const VariableLayout& layout = *variable.layout;
  const int64_t stride = layout.row_width * (1 + layout.num_slots);
  const int64_t count = chunk.num_rows;
  const int64_t* ids = chunk.ids;
  if (layout.kind() != HASH_EMBEDDING) {
    for (int64_t i = 0; i < count; ++i) {
      if (ids[i] < 0 || ids[i] >= layout.rows) {
        return absl::DataLossError(
            absl::StrCat("checkpoint file ", name, " holds row ", ids[i],
                         " outside [0, ", layout.rows, ")"));
      }
    }
  }
  // Import runs of consecutive rows bound for the same local shard.
  for (int64_t i = 0; i < count;) {
    const int shard = layout.ShardOf(ids[i]);
    int64_t end = i + 1;
    while (end < count && layout.ShardOf(ids[end]) == shard) ++end;
    if (variable.Holds(shard)) {
      absl::Span<const int64_t> run(ids + i, end - i);
      if (absl::Status s =
              variable.shard(shard).ImportRows(run, chunk.rows + i * stride);
          !s.ok()) {
        return absl::Status(
            s.code(), absl::StrCat("restore from ", name, ": ", s.message()));
      }
      (*versions)[shard] = std::max((*versions)[shard], version);
      (*restored_rows)[shard] += end - i;
    }
    i = end;
  }
  return absl::OkStatus();
}

bool CheckpointRestorer::FillsEveryRow(const VariableLayout& layout) const {
  auto saved = specs_.find(layout.spec.name());
  return layout.kind() != HASH_EMBEDDING && saved != specs_.end() &&
         Incompatibility(*saved->second, layout.spec).empty();
}

absl::Status CheckpointRestorer::Fill(const LocalVariable& variable,
                                      const std::atomic<bool>& cancelled) {
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
  std::vector<int64_t> restored_rows(layout.num_shards(), 0);
  int64_t total_bytes = 0;
  for (const CheckpointFile* f : files) total_bytes += f->bytes();
  TransferProgress progress(absl::StrCat("restore of '", variable.name(), "'"),
                            total_bytes);
  // Files restored kRestoreFileThreads at a time (each streamed through
  // its own small buffer): S3 answers one ranged GET after another per
  // stream, and disks read ahead per file.
  std::atomic<size_t> next_file{0};
  std::atomic<bool> failed{false};
  absl::Mutex mu;
  absl::Status first_error;
  auto work = [&] {
    std::vector<int64_t> my_versions(layout.num_shards(), 0);
    std::vector<int64_t> my_rows(layout.num_shards(), 0);
    for (size_t i; (i = next_file.fetch_add(1)) < files.size();) {
      absl::Status s = RestoreFile(*files[i], variable, cancelled, failed,
                                   &progress, &my_versions, &my_rows);
      if (!s.ok()) {
        absl::MutexLock lock(&mu);
        // A sibling's CANCELLED (after this failure) is not the cause.
        if (first_error.ok() ||
            (absl::IsCancelled(first_error) && !absl::IsCancelled(s))) {
          first_error = s;
        }
        failed = true;
        return;
      }
    }
    absl::MutexLock lock(&mu);
    for (int s = 0; s < layout.num_shards(); ++s) {
      versions[s] = std::max(versions[s], my_versions[s]);
      restored_rows[s] += my_rows[s];
    }
  };
  std::vector<std::thread> readers;
  const size_t threads = std::min<size_t>(kRestoreFileThreads, files.size());
  for (size_t t = 1; t < threads; ++t) readers.emplace_back(work);
  work();
  for (std::thread& t : readers) t.join();
  if (!first_error.ok()) return first_error;
  int64_t total_rows = 0;
  for (int s = 0; s < layout.num_shards(); ++s) {
    if (!variable.Holds(s)) continue;
    total_rows += restored_rows[s];
    // Shards allocated uninitialized (FillsEveryRow) must have been
    // written whole; a checkpoint that says otherwise is corrupt.
    if (layout.kind() != HASH_EMBEDDING &&
        restored_rows[s] != layout.shards[s].num_rows) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint ", uri_, " restored ", restored_rows[s], " rows of '",
          variable.name(), "' shard ", s, ", which has ",
          layout.shards[s].num_rows, " (its files do not cover the variable)"));
    }
    variable.shard(s).RestoreVersion(versions[s]);
  }
  LOG(INFO) << "restore: '" << variable.name() << "' " << total_rows
            << " rows from " << files.size() << " file(s) of " << uri_ << " ("
            << progress.Summary() << ")";
  return absl::OkStatus();
}

}  // namespace psrt

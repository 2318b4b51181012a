#include "ps_worker/data/data_sharding.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace psrt {

absl::StatusOr<ShardedData> ShardData(DatasetOptions data,
                                      const std::string& policy,
                                      int num_workers, int worker_index) {
  if (policy != "auto" && policy != "record" && policy != "file" &&
      policy != "none") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--data_sharding=", policy, ": expected auto, record, file or none"));
  }
  ShardedData out;
  std::string chosen = policy;
  std::string why;
  if (num_workers <= 1) {
    chosen = "none";
    why = "one worker";
  } else if (policy == "auto") {
    bool per_epoch = false;
    for (const std::string& p : data.patterns) {
      per_epoch = per_epoch || absl::StrContains(p, "{epoch}");
    }
    auto files = Dataset::ExpandPatterns(data.patterns, 0);
    const size_t count = files.ok() ? files->size() : 0;
    // Equal file counts per worker (not tf.data's "at least one each"): a
    // worker with one file more would train on a larger share.
    chosen =
        !per_epoch && count > 0 && count % static_cast<size_t>(num_workers) == 0
            ? "file"
            : "record";
    why = per_epoch
              ? "per-epoch files"
              : absl::StrCat(count, " file(s) for ", num_workers, " workers");
  }
  data.num_shards = chosen == "none" ? 1 : num_workers;
  data.shard_index = chosen == "none" ? 0 : worker_index;
  data.shard_by = chosen == "file" ? DatasetOptions::ShardBy::kFile
                                   : DatasetOptions::ShardBy::kRecord;
  out.options = std::move(data);
  out.description = absl::StrCat(
      "data sharding: ", chosen,
      chosen == "none" ? " (this worker trains on all of its input)"
      : chosen == "file"
          ? absl::StrCat(" (files ", worker_index, ", ", worker_index, " + ",
                         num_workers, ", ... of each epoch)")
          : absl::StrCat(" (records ", worker_index, ", ", worker_index, " + ",
                         num_workers, ", ... of each epoch)"),
      why.empty() ? "" : absl::StrCat("; ", policy, ": ", why));
  return out;
}

}  // namespace psrt

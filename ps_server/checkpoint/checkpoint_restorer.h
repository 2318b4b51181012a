// Restores a checkpoint into this PS's shards as variables are created.
//
// At start-up the PS opens the checkpoint (its manifest must exist and
// parse) and takes its global step. When CreateVariables later creates a
// variable the checkpoint holds, the new local shards are filled from the
// saved files before the variable becomes visible; if any file is missing,
// corrupt or inconsistent, the creation fails with the file named and
// nothing is created. The saved shards are re-cut on load: every saved row
// goes to whichever current shard its global row/id routes to, so the
// cluster may have another number of PS tasks and the variable another
// shard count than at save time. Kind, shape (hash: row width) and
// optimizer kind must match the saved spec.
#ifndef PSRT_PS_SERVER_CHECKPOINT_CHECKPOINT_RESTORER_H_
#define PSRT_PS_SERVER_CHECKPOINT_CHECKPOINT_RESTORER_H_

#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "proto/ps.pb.h"
#include "ps_server/checkpoint/shard_file.h"
#include "ps_server/shards/shard_store.h"
#include "storage/storage.h"

namespace psrt {

class CheckpointRestorer {
 public:
  // `uri` is one checkpoint's directory/prefix.
  static absl::StatusOr<std::unique_ptr<CheckpointRestorer>> Open(
      const std::string& uri, const StorageOpener& open_storage);

  const CheckpointManifest& manifest() const { return manifest_; }
  const std::string& uri() const { return uri_; }

  // Fills `variable`'s local shards (no-op if the checkpoint lacks it).
  absl::Status Fill(const LocalVariable& variable);

 private:
  CheckpointRestorer() = default;

  // Fill's phases: the saved files that can hold rows of `variable`'s
  // local shards; one file read and checked (size, CRC32C, header) before
  // it is trusted; its rows imported into whichever local shard each
  // routes to now (re-cut), keeping each shard's highest saved version.
  std::vector<const CheckpointFile*> FilesFor(const LocalVariable& variable,
                                              const VariableSpec& saved) const;
  absl::StatusOr<ShardFileContents> ReadVerified(
      const CheckpointFile& file, const LocalVariable& variable) const;
  absl::Status Import(const ShardFileContents& contents,
                      const std::string& name, const LocalVariable& variable,
                      std::vector<int64_t>* versions,
                      int64_t* restored_rows) const;

  std::string uri_;
  std::unique_ptr<Storage> storage_;
  CheckpointManifest manifest_;
  absl::flat_hash_map<std::string, const VariableSpec*> specs_;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_CHECKPOINT_CHECKPOINT_RESTORER_H_

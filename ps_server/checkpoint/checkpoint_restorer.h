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

#include <atomic>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "proto/ps.pb.h"
#include "ps_server/checkpoint/shard_file.h"
#include "ps_server/checkpoint/transfer_progress.h"
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

  // True if Fill will write every row of the variable's local shards (a
  // dense or embedding variable the checkpoint holds, compatibly): they
  // need no initial values. Fill then checks that every row was written.
  bool FillsEveryRow(const VariableLayout& layout) const;

  // Fills `variable`'s local shards (no-op if the checkpoint lacks it).
  // CANCELLED soon after `cancelled` turns true. Logs progress (MB, MB/s,
  // time left) every few seconds of a long restore.
  absl::Status Fill(const LocalVariable& variable,
                    const std::atomic<bool>& cancelled);

 private:
  CheckpointRestorer() = default;

  // Fill's phases: the saved files that can hold rows of `variable`'s
  // local shards; one file streamed (StreamShardFile: header checked
  // first, size and CRC32C at the end, when a bad file fails the whole
  // creation and the shards filled so far are discarded with it); each
  // chunk's rows imported into whichever local shard each routes to now
  // (re-cut), keeping each shard's highest saved version.
  std::vector<const CheckpointFile*> FilesFor(const LocalVariable& variable,
                                              const VariableSpec& saved) const;
  absl::Status RestoreFile(const CheckpointFile& file,
                           const LocalVariable& variable,
                           const std::atomic<bool>& cancelled,
                           const std::atomic<bool>& sibling_failed,
                           TransferProgress* progress,
                           std::vector<int64_t>* versions,
                           std::vector<int64_t>* restored_rows) const;
  absl::Status Import(const ShardFileChunk& chunk, const std::string& name,
                      const LocalVariable& variable, int64_t version,
                      std::vector<int64_t>* versions,
                      std::vector<int64_t>* restored_rows) const;

  std::string uri_;
  std::unique_ptr<Storage> storage_;
  CheckpointManifest manifest_;
  absl::flat_hash_map<std::string, const VariableSpec*> specs_;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_CHECKPOINT_CHECKPOINT_RESTORER_H_

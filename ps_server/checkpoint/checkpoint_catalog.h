// The checkpoints under a --checkpoint_uri root: names, manifests, the
// `latest` pointer, and resolving --restore.
//
// Layout under the root:
//   ckpt-<step>-<unix ms>/MANIFEST.json           written last
//   ckpt-<step>-<unix ms>/<variable>.shard-<i>-of-<n>
//   latest                                        the newest name, written
//                                                 after its manifest
#ifndef PSRT_PS_SERVER_CHECKPOINT_CHECKPOINT_CATALOG_H_
#define PSRT_PS_SERVER_CHECKPOINT_CHECKPOINT_CATALOG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/ps.pb.h"
#include "ps_server/shards/shard_store.h"
#include "storage/storage.h"

namespace psrt {

inline constexpr char kManifestName[] = "MANIFEST.json";
// 2: files' crc32c is of the whole file (1: of all but its last 4 bytes).
// Both are read.
inline constexpr int kManifestFormatVersion = 2;
inline constexpr char kLatestName[] = "latest";

// "ckpt-<10-digit step>-<13-digit unix ms>": sorts by step, then time.
std::string CheckpointName(int64_t global_step, absl::Time now);

// root + "/" + name, for either kind of URI.
std::string JoinUri(absl::string_view root, absl::string_view name);

// OK if `name` has the form CheckpointName makes ("ckpt-<digits>-<digits>",
// each number at most 19 digits): no '/', "..", or control characters can
// reach a storage key through it. INVALID_ARGUMENT naming it otherwise.
absl::Status CheckCheckpointName(absl::string_view name);

// Whether two checkpoint roots name the same place (trailing '/' ignored).
bool SameCheckpointRoot(absl::string_view a, absl::string_view b);

// The checkpoint name in `uri` = JoinUri(root, name), checked with
// CheckCheckpointName. PERMISSION_DENIED naming both when `uri` is not
// directly under `root`: a request may not make a PS write elsewhere.
absl::StatusOr<std::string> CheckpointNameUnder(absl::string_view root,
                                                absl::string_view uri);

// Checks a manifest's structure before it is trusted: format 1, at least
// one PS, file paths that are single safe names, every file of a listed
// variable, sizes and counts not negative. `described_as` names it in
// errors (DATA_LOSS).
absl::Status CheckManifest(const CheckpointManifest& manifest,
                           absl::string_view described_as);

struct CheckpointListing {
  std::string name;
  bool complete = false;  // has a manifest
  int64_t bytes = 0;      // every object under it
  int64_t objects = 0;
};

// Every ckpt-* under the root, complete or not, ordered by the time in
// their names (oldest first).
absl::StatusOr<std::vector<CheckpointListing>> ListCheckpoints(Storage& root);

// Reads and parses `<name>/MANIFEST.json` (name may be "" when the storage
// is rooted at the checkpoint). DATA_LOSS naming the file if it does not
// parse; NOT_FOUND if absent.
absl::StatusOr<CheckpointManifest> ReadManifest(Storage& storage,
                                                absl::string_view name);
std::string ManifestJson(const CheckpointManifest& manifest);
// Parses and checks (CheckManifest) a manifest's JSON. DATA_LOSS naming
// `described_as` if it does not parse or fails a check.
absl::StatusOr<CheckpointManifest> ParseManifest(
    absl::string_view json, absl::string_view described_as);

// The manifest of checkpoint `name` (at `uri`, begun at `start`) from every
// PS's SaveShards answer (index = PS task, named in errors by its address),
// or the first failure: a PS's error, or a shard of `variables` that no PS
// saved (FAILED_PRECONDITION naming the PS that should hold it).
absl::StatusOr<CheckpointManifest> BuildManifest(
    const std::string& uri, const std::string& name, absl::Time start,
    const std::vector<absl::StatusOr<SaveShardsResponse>>& saved,
    const std::vector<const LocalVariable*>& variables,
    const std::vector<std::string>& ps_addresses);

// The checkpoint `latest` names (NOT_FOUND when there is none).
absl::StatusOr<std::string> ReadLatest(Storage& root);

// What --restore means: "" (nothing), "latest" (the root's latest; an
// error if there is none), "auto" (latest if any, else nothing) or the URI
// of one checkpoint. Returns the checkpoint's URI or "".
absl::StatusOr<std::string> ResolveRestore(absl::string_view restore,
                                           absl::string_view checkpoint_uri,
                                           const StorageOpener& open_storage);

}  // namespace psrt

#endif  // PSRT_PS_SERVER_CHECKPOINT_CHECKPOINT_CATALOG_H_

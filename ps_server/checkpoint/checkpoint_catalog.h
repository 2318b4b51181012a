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
#include "ps_server/storage/storage.h"

namespace psrt {

inline constexpr char kManifestName[] = "MANIFEST.json";
inline constexpr char kLatestName[] = "latest";

// "ckpt-<10-digit step>-<13-digit unix ms>": sorts by step, then time.
std::string CheckpointName(int64_t global_step, absl::Time now);

// root + "/" + name, for either kind of URI.
std::string JoinUri(absl::string_view root, absl::string_view name);

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

// The checkpoint `latest` names (NOT_FOUND when there is none).
absl::StatusOr<std::string> ReadLatest(Storage& root);

// What --restore means: "" (nothing), "latest" (the root's latest; an
// error if there is none), "auto" (latest if any, else nothing) or the URI
// of one checkpoint. Returns the checkpoint's URI or "".
absl::StatusOr<std::string> ResolveRestore(absl::string_view restore,
                                           absl::string_view checkpoint_uri,
                                           const S3Options& s3);

}  // namespace psrt

#endif  // PSRT_PS_SERVER_CHECKPOINT_CHECKPOINT_CATALOG_H_

// A checkpoint as plain numpy files, loadable without psrt (psctl export):
// per variable `<file>.npy` (float32, the variable's shape; for hash
// embeddings [rows held, dim], sorted by id) and for hash embeddings
// `<file>.ids.npy` (int64, the id of each row), plus `index.json` naming
// each variable's files, kind, shape and row count and the checkpoint's
// step. Optimizer slots are not exported (they are for resuming training,
// which the checkpoint itself serves). `<file>` is the variable name with
// anything outside [A-Za-z0-9._-] percent-encoded ('/' -> %2F).
#ifndef PSRT_TOOLS_PSCTL_CHECKPOINT_EXPORT_H_
#define PSRT_TOOLS_PSCTL_CHECKPOINT_EXPORT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "proto/ps.pb.h"
#include "storage/storage.h"

namespace psrt {

struct ExportSummary {
  int variables = 0;
  int64_t rows = 0;
  int64_t bytes = 0;  // of the .npy files
};

// Exports the checkpoint `manifest` describes, whose files `checkpoint`
// (storage rooted at the checkpoint's directory) holds, into the local
// directory `out_dir` (created). Every shard file is verified (size,
// CRC32C, header) first: DATA_LOSS names a bad one.
absl::StatusOr<ExportSummary> ExportCheckpoint(
    Storage& checkpoint, const CheckpointManifest& manifest,
    const std::string& out_dir);

}  // namespace psrt

#endif  // PSRT_TOOLS_PSCTL_CHECKPOINT_EXPORT_H_

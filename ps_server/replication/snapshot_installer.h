// The rejoining side of a rejoin (--replicas > 1): one InstallSnapshot call
// from a PS serving shards this PS keeps copies of (rejoin_source.h)
// carries one shard's rows, which overwrite this PS's backup copy. Every
// message is checked as untrusted input first: a sender this PS is
// rejoining from, a backup copy held here (a primary copy is never
// overwritten), rows in order, payload sizes, ids that belong to the shard.
// The last chunk sets the copy's version and records the sequence from
// which the sender's stream updates it (ReplicaApplier::RecordSnapshot).
#ifndef PSRT_PS_SERVER_REPLICATION_SNAPSHOT_INSTALLER_H_
#define PSRT_PS_SERVER_REPLICATION_SNAPSHOT_INSTALLER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/ps.pb.h"
#include "ps_server/replication/replica_applier.h"
#include "ps_server/shards/shard_store.h"

namespace psrt {

class SnapshotInstaller {
 public:
  // Both must outlive the installer. `proven_from`: the PS the call proved
  // to come from (peer identity; -1: not proven): chunks naming another
  // sender are refused.
  SnapshotInstaller(ShardStore* store, ReplicaApplier* applier,
                    int proven_from = -1)
      : store_(store), applier_(applier), proven_from_(proven_from) {}

  absl::Status AddMessage(const grpc::ByteBuffer& message);
  absl::StatusOr<InstallSnapshotResponse> Finish();

 private:
  ShardStore* const store_;
  ReplicaApplier* const applier_;
  int proven_from_;
  int from_ = -1;
  const LocalVariable* variable_ = nullptr;
  int shard_ = -1;
  int64_t next_row_ = 0;
  // Rows [0, cold_rows_) go to this copy's cold tier (SnapshotChunk).
  int64_t cold_rows_ = 0;
  bool saw_last_ = false;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_REPLICATION_SNAPSHOT_INSTALLER_H_

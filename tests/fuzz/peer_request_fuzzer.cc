// PS-to-PS streams as a hostile peer sends them: Replicate (a primary's
// forwarded pushes) and InstallSnapshot (a rejoin's rows), through the
// backup's header checks, frame reading and apply, against a store that
// keeps backup copies of PS 1's shards. The first byte picks the method;
// then stream messages, each after its length (2 bytes, little-endian).
#include <cstdint>
#include <cstring>

#include "ps_server/replication/replica_applier.h"
#include "ps_server/replication/snapshot_installer.h"
#include "ps_server/rpc/push_dedup.h"
#include "tests/fuzz/fuzz_store.h"

namespace {

grpc::ByteBuffer Buffer(const uint8_t* data, size_t n) {
  grpc::Slice slice(data, n);
  return grpc::ByteBuffer(&slice, 1);
}

// Feeds the messages to `call` until one is refused; then Finish.
template <typename Call>
void Stream(Call* call, const uint8_t* data, size_t size) {
  while (size >= 2) {
    const size_t n = std::min<size_t>(size - 2, data[0] | (data[1] << 8));
    if (!call->AddMessage(Buffer(data + 2, n)).ok()) return;
    data += 2 + n;
    size -= 2 + n;
  }
  (void)call->Finish();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static psrt::ShardStore* store =
      psrt::MakeFuzzStore(/*replicated=*/true).release();
  static psrt::DedupScopes* dedup = new psrt::DedupScopes(2);
  static psrt::ReplicaApplier* applier =
      new psrt::ReplicaApplier(store, dedup, 1 << 20);
  if (size == 0) return 0;
  const uint8_t method = data[0];
  ++data;
  --size;
  // As the service calls them once a call proved it comes from PS 1.
  if (method % 2 == 0) {
    psrt::ReplicaApplier::Call call(applier, /*proven_from=*/1);
    Stream(&call, data, size);
  } else {
    psrt::SnapshotInstaller installer(store, applier, /*proven_from=*/1);
    Stream(&installer, data, size);
  }
  return 0;
}

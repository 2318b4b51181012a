// One item of a Pull or Push request, resolved against the store and checked
// as untrusted input: the variable exists, the shard lives here, ranges and
// sizes fit, ids belong to the shard, gradients are finite. Error messages
// name the variable, the shard and the numbers involved.
#ifndef PSRT_PS_SERVER_RPC_REQUEST_ITEM_H_
#define PSRT_PS_SERVER_RPC_REQUEST_ITEM_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/frame_reader.h"
#include "proto/ps.pb.h"
#include "ps_server/shards/shard_store.h"

namespace psrt {

// kReplica: a push a primary forwards to this PS, its backup (--replicas);
// its items must name backup copies, where kPull and kPush must name
// shards this PS is primary for.
enum class RequestKind { kPull, kPush, kReplica };

// Payload key marking the status of a push rejected for a NaN/Inf gradient.
inline constexpr char kNonFiniteGradient[] = "psrt/nonfinite-gradient";

struct ResolvedItem {
  const LocalVariable* variable = nullptr;
  int shard = 0;
  bool by_range = false;     // addresses floats by range (DENSE), not ids
  int64_t offset = 0;        // by range
  int64_t count = 0;         // by range: floats
  std::vector<int64_t> ids;  // by id, copied out of the payload
  PayloadView grad;          // push only: float32 values
  float max_abs_grad = 0;    // push only: the gradient's largest magnitude
  float learning_rate = 0;   // push only: effective rate
  bool assign = false;       // push only: `grad` holds values (dense)
  // Push: the type the gradient came in; pull: the type to send values in.
  WireDtype dtype = FLOAT32;
  // Push of 16-bit values: `grad` views them decoded here (move-only, so
  // the view cannot outlive a copy).
  std::unique_ptr<float[]> decoded_grad;

  Shard& target() const { return variable->shard(shard); }
  ShardSlice slice() const { return {offset, count, ids}; }
  int64_t value_floats() const { return target().ValueFloats(slice()); }
};

// Fills `out` from `item` and the frame's payloads. Gradients are checked
// for NaN/Inf (status INVALID_ARGUMENT; the message says which element).
absl::Status ResolveItem(const ShardStore& store, const TensorItem& item,
                         const FrameReader& frame, RequestKind kind,
                         ResolvedItem* out);

// The index of the first NaN or Inf among float32 `values` (size() / 4 if
// there is none) and, when there is none, their largest magnitude
// (*max_abs). Read in place: values split across slices or misaligned pass
// through a small aligned buffer (ForEachFloatRun). REQUIRES:
// values.size() % 4 == 0.
size_t FirstNonFiniteMaxAbs(const PayloadView& values, float* max_abs);

}  // namespace psrt

#endif  // PSRT_PS_SERVER_RPC_REQUEST_ITEM_H_

// What one batched pull or push asks of the cluster: a PullOp or PushOp per
// variable, and the StepOptions that place the call in a training step
// (see client.h).
#ifndef PSRT_CLIENTS_CPP_OPS_H_
#define PSRT_CLIENTS_CPP_OPS_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/types/span.h"
#include "proto/ps.pb.h"

namespace psrt {

// One variable's part of a batched pull. `out` receives the whole dense
// variable (row-major, its full shape) or ids.size() rows of `dim` floats.
// REQUIRES: ids and out stay valid until the pull returns.
struct PullOp {
  std::string variable;
  absl::Span<const int64_t> ids;  // empty for a dense variable
  float* out = nullptr;
  bool ids_unique = false;  // caller promises no repeats: skips de-dup

  static PullOp Dense(std::string variable, float* out) {
    return {std::move(variable), {}, out};
  }
  static PullOp Rows(std::string variable, absl::Span<const int64_t> ids,
                     float* out) {
    return {std::move(variable), ids, out};
  }
};

// One variable's part of a batched push: a gradient with the layout of the
// matching PullOp's `out`. learning_rate > 0 overrides the variable's.
struct PushOp {
  std::string variable;
  absl::Span<const int64_t> ids;
  const float* grad = nullptr;
  float learning_rate = 0;
  bool ids_unique = false;
  // Dense only: `grad` holds values that replace the variable's (sent as
  // float32 whatever the wire dtype; the optimizer's slots stay). ASYNC
  // pushes only.
  bool assign = false;

  static PushOp Dense(std::string variable, const float* grad) {
    return {std::move(variable), {}, grad};
  }
  static PushOp AssignDense(std::string variable, const float* values) {
    PushOp op{std::move(variable), {}, values};
    op.assign = true;
    return op;
  }
  static PushOp Rows(std::string variable, absl::Span<const int64_t> ids,
                     const float* grad) {
    return {std::move(variable), ids, grad};
  }
};

// How a batched pull or push takes part in a training step (see
// Consistency in proto/ps.proto). Default: asynchronous, no step.
struct StepOptions {
  Consistency consistency;
  int64_t step = 0;
};

}  // namespace psrt

#endif  // PSRT_CLIENTS_CPP_OPS_H_

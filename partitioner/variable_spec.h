// Validation and derived properties of a VariableSpec (proto/ps.proto).
#ifndef PSRT_PARTITIONER_VARIABLE_SPEC_H_
#define PSRT_PARTITIONER_VARIABLE_SPEC_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "proto/ps.pb.h"

namespace psrt {

// Checks a spec for everything the servers rely on (name, shape, partition,
// initializer and optimizer hyper-parameters), filling defaults for the
// optimizer fields left at 0 (TF's defaults: momentum 0.9, beta1 0.9, beta2
// 0.999, epsilon 1e-7, accumulators 0.1, ftrl beta 0). Errors name the
// variable and the field.
absl::Status NormalizeVariableSpec(VariableSpec* spec);

// Optimizer slots kept per parameter (Momentum 1, Adagrad 1, Adam 2, FTRL 2).
int NumOptimizerSlots(OptimizerSpec::Kind kind);

// Rows along dim 0 (a scalar is one row; HASH_EMBEDDING: capacity, 0 if
// unbounded) and floats per row.
int64_t NumRows(const VariableSpec& spec);
int64_t RowWidth(const VariableSpec& spec);

// One-line description for error messages: "emb: EMBEDDING [1000, 16]
// shards=4 MOD adagrad(lr=0.1)".
std::string DescribeSpec(const VariableSpec& spec);

// True if both specs describe the same variable (bitwise-equal fields).
bool SameSpec(const VariableSpec& a, const VariableSpec& b);

}  // namespace psrt

#endif  // PSRT_PARTITIONER_VARIABLE_SPEC_H_

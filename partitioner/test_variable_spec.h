// A VariableSpec for tests, in one call: name, kind, shape, shard count,
// optimizer and learning rate, routing (default DIV). Other fields keep
// their defaults (NormalizeVariableSpec fills them).
#ifndef PSRT_PARTITIONER_TEST_VARIABLE_SPEC_H_
#define PSRT_PARTITIONER_TEST_VARIABLE_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "proto/ps.pb.h"

namespace psrt {

inline VariableSpec TestVariableSpec(
    const std::string& name, VariableKind kind, std::vector<int64_t> shape,
    int shards, OptimizerSpec::Kind optimizer, float learning_rate = 0.01f,
    PartitionSpec::Routing routing = PartitionSpec::DIV) {
  VariableSpec s;
  s.set_name(name);
  s.set_kind(kind);
  for (int64_t d : shape) s.add_shape(d);
  s.mutable_partition()->set_num_shards(shards);
  s.mutable_partition()->set_routing(routing);
  s.mutable_optimizer()->set_kind(optimizer);
  s.mutable_optimizer()->set_learning_rate(learning_rate);
  return s;
}

}  // namespace psrt

#endif  // PSRT_PARTITIONER_TEST_VARIABLE_SPEC_H_

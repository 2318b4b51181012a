// A variable spec for handler tests: SGD at learning rate 1, so a pushed
// gradient g moves a parameter by exactly -g.
#ifndef PSRT_PS_SERVER_RPC_TEST_VARIABLE_SPEC_H_
#define PSRT_PS_SERVER_RPC_TEST_VARIABLE_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "proto/ps.pb.h"

namespace psrt {

inline VariableSpec TestVariableSpec(const std::string& name, VariableKind kind,
                                     std::vector<int64_t> shape,
                                     int shards = 1) {
  VariableSpec s;
  s.set_name(name);
  s.set_kind(kind);
  for (int64_t d : shape) s.add_shape(d);
  s.mutable_partition()->set_num_shards(shards);
  s.mutable_optimizer()->set_learning_rate(1.0f);
  return s;
}

}  // namespace psrt

#endif  // PSRT_PS_SERVER_RPC_TEST_VARIABLE_SPEC_H_

// CreateVariables requests from the wire: parsed, normalized and checked
// against a store that already holds variables, within a 64 MiB limit.
#include <cstdint>

#include "proto/ps.pb.h"
#include "tests/fuzz/fuzz_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  psrt::CreateVariablesRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  if (request.specs_size() > 64) return 0;  // the store's cost, not a bug
  auto store = psrt::MakeFuzzStore();
  std::vector<psrt::VariableSpec> specs(request.specs().begin(),
                                        request.specs().end());
  (void)store->CreateVariables(request.first_index(), specs, request.num_ps());
  return 0;
}

// Memory that cannot be had while a request is read or answered is the
// caller's error, not the server's end: a std::bad_alloc thrown there
// becomes RESOURCE_EXHAUSTED to that caller, who is answered (a throw into
// gRPC's callback would be swallowed and the call never answered). Only
// for code that holds no lock it took by hand when it throws: the
// validation of a request, the copying of a pull's values.
#ifndef PSRT_PS_SERVER_RPC_OUT_OF_MEMORY_H_
#define PSRT_PS_SERVER_RPC_OUT_OF_MEMORY_H_

#include <new>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace psrt {

// Runs `f` (it returns absl::Status or absl::StatusOr<T>).
template <typename F>
auto AnswerOutOfMemory(const char* method, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(
        method, ": the PS could not allocate the memory this request needs"));
  }
}

}  // namespace psrt

#endif  // PSRT_PS_SERVER_RPC_OUT_OF_MEMORY_H_

// Rendezvous requests from the wire (PS 0's meeting point for the workers'
// all-reduce ring): each input is split into requests, served in turn by
// one store of a 3-worker cluster, which must refuse what does not fit and
// stay within its bounds.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "proto/ps.pb.h"
#include "ps_server/rpc/rendezvous_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  psrt::RendezvousStore store(3);
  // Requests prefixed by a 2-byte length, until the input ends.
  size_t at = 0;
  while (at + 2 <= size) {
    const size_t length = data[at] | (size_t{data[at + 1]} << 8);
    at += 2;
    if (length > size - at) break;
    psrt::RendezvousRequest request;
    if (request.ParseFromArray(data + at, static_cast<int>(length))) {
      auto answer = store.Serve(request);
      if (answer.ok()) {
        for (const psrt::RendezvousEntry& found : answer->found()) {
          if (found.value().size() > store.max_value_bytes()) std::abort();
        }
        if (answer->found_size() > request.get_size()) std::abort();
      }
    }
    at += length;
  }
  return 0;
}

// HMAC-SHA256, the one keyed hash psrt's proofs use (PS-to-PS calls in
// peer_identity.h, data-plane hellos in dataplane/connection_gate.h).
#ifndef PSRT_SECURITY_HMAC_H_
#define PSRT_SECURITY_HMAC_H_

#include <string>

#include "absl/strings/string_view.h"

namespace psrt {

// The 32-byte HMAC-SHA256 of `data` under `key`.
std::string HmacSha256(absl::string_view key, absl::string_view data);

}  // namespace psrt

#endif  // PSRT_SECURITY_HMAC_H_

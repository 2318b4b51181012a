// The local address a fabric endpoint should bind to reach a peer: tcp
// binds it, so the peer sees the address the hello names.
#ifndef PSRT_DATAPLANE_LOCAL_ADDRESS_H_
#define PSRT_DATAPLANE_LOCAL_ADDRESS_H_

#include <string>

namespace psrt::dataplane {

// The local address this host reaches `host` (a name or an IP) from: a
// UDP socket's, connected there (no packet is sent). "" when it cannot be
// told (then the provider picks).
std::string LocalAddressToward(const std::string& host);

}  // namespace psrt::dataplane

#endif  // PSRT_DATAPLANE_LOCAL_ADDRESS_H_

// The TLS and auth-token flags every psrt binary shares (server, worker,
// tools), and the SecurityOptions they describe.
#ifndef PSRT_CLI_SECURITY_FLAGS_H_
#define PSRT_CLI_SECURITY_FLAGS_H_

#include "absl/status/statusor.h"
#include "security/security.h"

namespace psrt {

// From --tls_cert_file, --tls_key_file, --tls_ca_file,
// --tls_require_client_cert and --auth_token_file (or $PSRT_AUTH_TOKEN).
absl::StatusOr<SecurityOptions> SecurityOptionsFromFlags();

}  // namespace psrt

#endif  // PSRT_CLI_SECURITY_FLAGS_H_

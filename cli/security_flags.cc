#include "cli/security_flags.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gflags/gflags.h"

DEFINE_string(tls_cert_file, "",
              "PEM certificate (chain): servers serve TLS with it; under "
              "mutual TLS it is also this process's client certificate.");
DEFINE_string(tls_key_file, "", "PEM private key of --tls_cert_file.");
DEFINE_string(tls_ca_file, "",
              "PEM CA bundle that signed the peers' certificates. Clients: "
              "set it to connect with TLS. Servers: the CA of client "
              "certificates (mutual TLS) and of the other servers.");
DEFINE_bool(tls_require_client_cert, false,
            "Servers: require and verify client certificates (mutual TLS).");
DEFINE_string(auth_token_file, "",
              "File holding the shared token every RPC must carry (servers "
              "check it, clients send it); empty: $PSRT_AUTH_TOKEN, else "
              "none.");

namespace psrt {

absl::StatusOr<SecurityOptions> SecurityOptionsFromFlags() {
  SecurityOptions o;
  o.tls_cert_file = FLAGS_tls_cert_file;
  o.tls_key_file = FLAGS_tls_key_file;
  o.tls_ca_file = FLAGS_tls_ca_file;
  o.require_client_cert = FLAGS_tls_require_client_cert;
  if (!FLAGS_auth_token_file.empty()) {
    auto token = ReadSecretFile(FLAGS_auth_token_file);
    if (!token.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--auth_token_file: ", token.status().message()));
    }
    o.auth_token = std::string(absl::StripAsciiWhitespace(*token));
    if (o.auth_token.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--auth_token_file=", FLAGS_auth_token_file, " is empty"));
    }
  } else if (const char* env = std::getenv("PSRT_AUTH_TOKEN")) {
    o.auth_token = std::string(absl::StripAsciiWhitespace(env));
  }
  return o;
}

}  // namespace psrt

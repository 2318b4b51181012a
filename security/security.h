// TLS (optionally mutual) and a shared-token check for every psrt RPC.
//
// One SecurityOptions describes a process both as a server and as a client
// (a PS calls the other PS during checkpoints): its certificate and key
// (server identity; also its client certificate under mutual TLS), the CA
// that signed its peers' certificates, and the token every call carries in
// its `authorization: Bearer <token>` metadata. Everything empty: plaintext,
// no token (one machine, trusted network).
#ifndef PSRT_SECURITY_SECURITY_H_
#define PSRT_SECURITY_SECURITY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/client_interceptor.h"

namespace psrt {

struct SecurityOptions {
  std::string tls_cert_file;  // PEM; with tls_key_file: serve TLS
  std::string tls_key_file;
  std::string tls_ca_file;  // PEM CA bundle to verify peers (clients: the
                            // server's certificate; servers: clients'
                            // certificates when require_client_cert)
  bool require_client_cert = false;  // mutual TLS
  std::string auth_token;            // shared secret; empty: no check
  // ps_server only: the secret PS prove their task with on PS-to-PS calls
  // (peer_identity.h). Never given to workers or clients.
  std::string peer_secret;

  // Channels to psrt servers use TLS.
  bool tls() const { return !tls_ca_file.empty() || !tls_cert_file.empty(); }
  // A server serves TLS.
  bool serves_tls() const {
    return !tls_cert_file.empty() && !tls_key_file.empty();
  }
};

// Credentials for channels to psrt servers. INVALID_ARGUMENT naming the
// file if one cannot be read.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const SecurityOptions& options);
// Credentials for a psrt server's listening port.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const SecurityOptions& options);

// Adds the token to every call made on a channel (works with and without
// TLS). nullptr when there is no token.
std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
MakeTokenInterceptorFactory(const std::string& token);

// A channel to `address` with the credentials and token of `options`.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
    const std::string& address, const SecurityOptions& options,
    const grpc::ChannelArguments& args = grpc::ChannelArguments());

// OK if the call carries `token` (always OK for an empty token); otherwise
// UNAUTHENTICATED. Compares in constant time.
absl::Status CheckToken(const grpc::CallbackServerContext* context,
                        const std::string& token);

// Reads a whole file (PEM, token). INVALID_ARGUMENT naming it on failure.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path);

}  // namespace psrt

#endif  // PSRT_SECURITY_SECURITY_H_

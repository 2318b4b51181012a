#include "security/security.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/server_credentials.h"

namespace psrt {
namespace {

constexpr char kAuthHeader[] = "authorization";

class TokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit TokenInterceptor(const std::string* value) : value_(value) {}
  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::
                PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({kAuthHeader, *value_});
    }
    methods->Proceed();
  }

 private:
  const std::string* value_;
};

class TokenInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit TokenInterceptorFactory(const std::string& token)
      : value_(absl::StrCat("Bearer ", token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new TokenInterceptor(&value_);
  }

 private:
  const std::string value_;
};

}  // namespace

absl::StatusOr<std::string> ReadSecretFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", path));
  }
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const SecurityOptions& o) {
  if (!o.tls()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  if (!o.tls_ca_file.empty()) {
    auto ca = ReadSecretFile(o.tls_ca_file);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
  }
  if (!o.tls_cert_file.empty() && !o.tls_key_file.empty()) {
    auto cert = ReadSecretFile(o.tls_cert_file);
    if (!cert.ok()) return cert.status();
    auto key = ReadSecretFile(o.tls_key_file);
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *cert;
    ssl.pem_private_key = *key;
  }
  return grpc::SslCredentials(ssl);
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const SecurityOptions& o) {
  if (o.tls_cert_file.empty() && o.tls_key_file.empty()) {
    if (o.require_client_cert) {
      return absl::InvalidArgumentError(
          "--tls_require_client_cert needs --tls_cert_file and --tls_key_file");
    }
    if (!o.tls_ca_file.empty()) {
      // The CA alone turns nothing on: the server would serve plaintext.
      return absl::InvalidArgumentError(
          "--tls_ca_file without --tls_cert_file and --tls_key_file: a "
          "server serves TLS only with its own certificate and key, so it "
          "would serve plaintext; add them, or drop --tls_ca_file");
    }
    return grpc::InsecureServerCredentials();
  }
  if (o.tls_cert_file.empty() || o.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "TLS needs both --tls_cert_file and --tls_key_file");
  }
  auto cert = ReadSecretFile(o.tls_cert_file);
  if (!cert.ok()) return cert.status();
  auto key = ReadSecretFile(o.tls_key_file);
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions ssl(
      o.require_client_cert
          ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
          : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  if (o.require_client_cert) {
    if (o.tls_ca_file.empty()) {
      return absl::InvalidArgumentError(
          "--tls_require_client_cert needs --tls_ca_file (the CA of client "
          "certificates)");
    }
    auto ca = ReadSecretFile(o.tls_ca_file);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
  }
  ssl.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(ssl);
}

std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
MakeTokenInterceptorFactory(const std::string& token) {
  if (token.empty()) return nullptr;
  return std::make_unique<TokenInterceptorFactory>(token);
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
    const std::string& address, const SecurityOptions& options,
    const grpc::ChannelArguments& args) {
  auto credentials = MakeChannelCredentials(options);
  if (!credentials.ok()) return credentials.status();
  std::vector<
      std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      interceptors;
  if (auto f = MakeTokenInterceptorFactory(options.auth_token)) {
    interceptors.push_back(std::move(f));
  }
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      address, *credentials, args, std::move(interceptors));
}

absl::Status CheckToken(const grpc::CallbackServerContext* context,
                        const std::string& token) {
  if (token.empty()) return absl::OkStatus();
  const auto& metadata = context->client_metadata();
  auto it = metadata.find(kAuthHeader);
  const std::string expected = absl::StrCat("Bearer ", token);
  bool match = false;
  if (it != metadata.end() && it->second.size() == expected.size()) {
    unsigned char diff = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
      diff |= static_cast<unsigned char>(it->second.data()[i] ^ expected[i]);
    }
    match = diff == 0;
  }
  if (match) return absl::OkStatus();
  return absl::UnauthenticatedError(
      it == metadata.end()
          ? "this psrt server requires an auth token (authorization: Bearer "
            "...); set --auth_token_file / PSRT_AUTH_TOKEN on the client"
          : "wrong auth token");
}

}  // namespace psrt

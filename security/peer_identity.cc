#include "security/peer_identity.h"

#include <openssl/crypto.h>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "security/hmac.h"

namespace psrt {
namespace {

std::string ProofBytes(const std::string& secret, int task,
                       absl::string_view method) {
  const std::string credential =
      HmacSha256(secret, absl::StrCat("psrt-ps/", task));
  return HmacSha256(credential, method);
}

}  // namespace

PeerIdentity::PeerIdentity(std::string secret) : secret_(std::move(secret)) {}

std::string PeerIdentity::Proof(int task, absl::string_view method) const {
  return absl::StrCat(
      task, ":", absl::BytesToHexString(ProofBytes(secret_, task, method)));
}

void PeerIdentity::Sign(grpc::ClientContext* context, int task,
                        absl::string_view method) const {
  if (!enabled()) return;
  context->AddMetadata(kMetadataKey, Proof(task, method));
}

absl::StatusOr<int> PeerIdentity::Verify(const grpc::ServerContextBase* context,
                                         absl::string_view method,
                                         int num_ps) const {
  const auto& metadata = context->client_metadata();
  auto it = metadata.find(kMetadataKey);
  if (it == metadata.end()) {
    return absl::PermissionDeniedError(absl::StrCat(
        method, " is a PS-to-PS call and this one carries no PS's proof (",
        kMetadataKey,
        "): the token of a worker or client does not make it a PS"));
  }
  const absl::string_view value(it->second.data(), it->second.size());
  const size_t colon = value.find(':');
  int task = -1;
  if (colon == absl::string_view::npos ||
      !absl::SimpleAtoi(value.substr(0, colon), &task) || task < 0 ||
      task >= num_ps) {
    return absl::PermissionDeniedError(absl::StrCat(
        method, ": malformed ", kMetadataKey,
        " (not <task>:<proof> for a PS of this ", num_ps, "-PS cluster)"));
  }
  const std::string expected =
      absl::BytesToHexString(ProofBytes(secret_, task, method));
  const absl::string_view given = value.substr(colon + 1);
  if (given.size() != expected.size() ||
      CRYPTO_memcmp(given.data(), expected.data(), expected.size()) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        method, ": the call claims to come from PS ", task,
        " but its proof does not check (a different --peer_secret_file, "
        "or not PS ",
        task, ")"));
  }
  return task;
}

}  // namespace psrt

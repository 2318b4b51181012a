#include "dataplane/connection_gate.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "absl/strings/str_cat.h"
#include "security/hmac.h"

namespace psrt::dataplane {
namespace {

void PutLength(std::string* out, size_t n) {
  out->push_back(static_cast<char>(n & 0xff));
  out->push_back(static_cast<char>(n >> 8));
}

// Reads a 2-byte length and that many bytes from `*body`, advancing it.
absl::StatusOr<std::string> TakeField(absl::string_view* body,
                                      absl::string_view name) {
  if (body->size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("data-plane hello: ", name, "'s length cut off"));
  }
  const size_t n = static_cast<uint8_t>((*body)[0]) |
                   (static_cast<size_t>(static_cast<uint8_t>((*body)[1])) << 8);
  body->remove_prefix(2);
  if (n > body->size()) {
    return absl::InvalidArgumentError(absl::StrCat("data-plane hello: ", name,
                                                   " of ", n, " bytes, only ",
                                                   body->size(), " left"));
  }
  std::string field(body->substr(0, n));
  body->remove_prefix(n);
  return field;
}

void RandomBytes(void* out, size_t n) {
  RAND_bytes(static_cast<unsigned char*>(out), static_cast<int>(n));
}

uint32_t RandomId() {
  uint32_t id = 0;
  RandomBytes(&id, sizeof(id));
  return id;
}

}  // namespace

uint64_t NewConnectionKey() {
  uint64_t key = 0;
  while (key == 0) {
    RandomBytes(&key, sizeof(key));
  }
  return key;
}

std::string HelloProof(absl::string_view token, const Challenge& challenge,
                       absl::string_view client_address) {
  if (token.empty()) return "";
  return HmacSha256(
      token, absl::StrCat("psrt-dataplane/1|", challenge.connection_id, "|",
                          challenge.nonce, "|", client_address));
}

std::string EncodeHello(absl::string_view client_address,
                        absl::string_view proof) {
  std::string body;
  PutLength(&body, client_address.size());
  body.append(client_address.data(), client_address.size());
  PutLength(&body, proof.size());
  body.append(proof.data(), proof.size());
  return body;
}

absl::StatusOr<Hello> DecodeHello(absl::string_view body) {
  Hello hello;
  absl::StatusOr<std::string> address = TakeField(&body, "address");
  if (!address.ok()) return address.status();
  absl::StatusOr<std::string> proof = TakeField(&body, "proof");
  if (!proof.ok()) return proof.status();
  if (!body.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data-plane hello: ", body.size(), " bytes after the proof"));
  }
  hello.client_address = *std::move(address);
  hello.proof = *std::move(proof);
  return hello;
}

ConnectionGate::ConnectionGate(std::string token, size_t max_pending,
                               absl::Duration ttl)
    : token_(std::move(token)),
      max_pending_(max_pending),
      ttl_(ttl),
      next_id_(RandomId()) {}

Challenge ConnectionGate::Issue() {
  Challenge challenge;
  challenge.nonce.resize(kNonceBytes);
  RandomBytes(challenge.nonce.data(), kNonceBytes);
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  DropExpiredLocked(now);
  while (pending_.size() >= max_pending_ && !issue_order_.empty()) {
    pending_.erase(issue_order_.front());
    issue_order_.pop_front();
  }
  // Id 0 is never issued: a frame naming it belongs to no connection.
  do {
    challenge.connection_id = next_id_++;
  } while (challenge.connection_id == 0 ||
           pending_.contains(challenge.connection_id));
  pending_[challenge.connection_id] = Pending{challenge.nonce, now + ttl_};
  issue_order_.push_back(challenge.connection_id);
  // Redeemed ids stay in issue_order_ until they reach its front; keep it
  // within twice the bound.
  if (issue_order_.size() > 2 * max_pending_) {
    std::deque<uint32_t> live;
    for (uint32_t id : issue_order_) {
      if (pending_.contains(id)) live.push_back(id);
    }
    issue_order_.swap(live);
  }
  return challenge;
}

absl::Status ConnectionGate::Redeem(uint32_t connection_id, const Hello& hello,
                                    bool* was_outstanding) {
  if (was_outstanding != nullptr) *was_outstanding = false;
  Challenge challenge;
  {
    absl::MutexLock lock(&mu_);
    DropExpiredLocked(absl::Now());
    auto it = pending_.find(connection_id);
    if (it == pending_.end()) {
      return absl::PermissionDeniedError(absl::StrCat(
          "data-plane hello for connection ", connection_id,
          ": no such challenge outstanding (never issued, used, or expired "
          "after ",
          absl::FormatDuration(ttl_), ")"));
    }
    if (was_outstanding != nullptr) *was_outstanding = true;
    challenge.connection_id = connection_id;
    challenge.nonce = std::move(it->second.nonce);
    // Used once, whatever the outcome: a wrong guess burns the challenge.
    pending_.erase(it);
  }
  const std::string expected =
      HelloProof(token_, challenge, hello.client_address);
  if (expected.size() != hello.proof.size() ||
      CRYPTO_memcmp(expected.data(), hello.proof.data(), expected.size()) !=
          0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "data-plane hello for connection ", connection_id,
        ": the proof does not check (a client without the cluster's token?)"));
  }
  return absl::OkStatus();
}

size_t ConnectionGate::pending() const {
  absl::MutexLock lock(&mu_);
  return pending_.size();
}

void ConnectionGate::DropExpiredLocked(absl::Time now) {
  while (!issue_order_.empty()) {
    auto it = pending_.find(issue_order_.front());
    if (it != pending_.end() && it->second.expires > now) break;
    if (it != pending_.end()) pending_.erase(it);
    issue_order_.pop_front();
  }
}

}  // namespace psrt::dataplane

#include "security/hmac.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

namespace psrt {

std::string HmacSha256(absl::string_view key, absl::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out,
       &length);
  return std::string(reinterpret_cast<const char*>(out), length);
}

}  // namespace psrt

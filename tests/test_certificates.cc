#include "tests/test_certificates.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace psrt {

absl::Status MakeTestCertificates(const std::string& dir) {
  const std::string script = absl::StrCat(
      "set -e; rm -rf ", dir, "; mkdir -p ", dir, "; cd ", dir, "\n",
      "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem "
      "-days 2 -subj /CN=psrt-test-ca\n",
      "openssl req -x509 -newkey rsa:2048 -nodes -keyout other.key -out "
      "other.pem -days 2 -subj /CN=some-other-ca\n",
      "openssl req -newkey rsa:2048 -nodes -keyout server.key -out "
      "server.csr -subj /CN=localhost\n",
      "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > san.ext\n",
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key "
      "-CAcreateserial -out server.pem -days 2 -extfile san.ext\n",
      "openssl req -newkey rsa:2048 -nodes -keyout client.key -out "
      "client.csr -subj /CN=psrt-client\n",
      "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key "
      "-CAcreateserial -out client.pem -days 2\n",
      "echo 's3cret-token-for-tests' > token\n");
  if (std::system(
          absl::StrCat("(", script, ") > ", dir, ".log 2>&1").c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("openssl failed; see ", dir, ".log"));
  }
  return absl::OkStatus();
}

}  // namespace psrt

// Certificates made with the openssl CLI for TLS tests, in one directory:
// ca.pem/ca.key (psrt-test-ca), other.pem (another CA that signed nothing
// here), server.pem/server.key (signed by ca, for localhost and
// 127.0.0.1), client.pem/client.key (signed by ca), and `token` (a shared
// auth token file).
#ifndef PSRT_TESTS_TEST_CERTIFICATES_H_
#define PSRT_TESTS_TEST_CERTIFICATES_H_

#include <string>

#include "absl/status/status.h"

namespace psrt {

// Makes them in `dir` (emptied first); the openssl output goes to
// <dir>.log, which an error names.
absl::Status MakeTestCertificates(const std::string& dir);

}  // namespace psrt

#endif  // PSRT_TESTS_TEST_CERTIFICATES_H_

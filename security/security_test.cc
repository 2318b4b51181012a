#include "security/security.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

TEST(SecurityTest, ACaFileAloneDoesNotPretendAServerServesTls) {
  SecurityOptions o;
  o.tls_ca_file = "/etc/ssl/certs/ca-certificates.crt";
  EXPECT_TRUE(o.tls()) << "a client with a CA connects with TLS";
  EXPECT_FALSE(o.serves_tls());
  auto credentials = MakeServerCredentials(o);
  ASSERT_FALSE(credentials.ok());
  EXPECT_EQ(credentials.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(credentials.status().message(),
                                "--tls_ca_file without --tls_cert_file"))
      << credentials.status();
  // Nothing set: plaintext, as documented for one machine.
  EXPECT_TRUE(MakeServerCredentials(SecurityOptions()).ok());
}

}  // namespace
}  // namespace psrt

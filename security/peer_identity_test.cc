#include "security/peer_identity.h"

#include "gtest/gtest.h"

namespace psrt {
namespace {

constexpr char kRenew[] = "/psrt.ParameterServer/RenewLease";

TEST(PeerIdentityTest, ProofsDifferByTaskMethodAndSecret) {
  const PeerIdentity a("cluster secret");
  const PeerIdentity b("another secret");
  EXPECT_NE(a.Proof(1, kRenew), a.Proof(2, kRenew));
  EXPECT_NE(a.Proof(1, kRenew), a.Proof(1, "/psrt.ParameterServer/Rejoin"));
  EXPECT_NE(a.Proof(1, kRenew), b.Proof(1, kRenew));
  EXPECT_EQ(a.Proof(1, kRenew),
            PeerIdentity("cluster secret").Proof(1, kRenew));
  // "<task>:" then 64 hex digits.
  EXPECT_EQ(a.Proof(12, kRenew).size(), 3 + 64);
  EXPECT_EQ(a.Proof(12, kRenew).substr(0, 3), "12:");
  EXPECT_TRUE(a.enabled());
  EXPECT_FALSE(PeerIdentity().enabled());
}

}  // namespace
}  // namespace psrt

// A shard copy's role: the path of the diagram in shard_role.h, and every
// transition refused from a state it does not leave (a late or repeated
// trigger moves nothing).
#include "ps_server/replication/shard_role.h"

#include <vector>

#include "gtest/gtest.h"

namespace psrt {
namespace {

using Role = ShardRole::Role;

TEST(ShardRoleTest, AFailoverRejoinAndHandbackFollowTheDiagram) {
  // PS 0's shard on PS 0, and its copy on PS 1.
  ShardRole on_ps0(Role::kPrimary);
  ShardRole on_ps1(Role::kBackup);
  EXPECT_TRUE(on_ps0.MayServe());
  EXPECT_FALSE(on_ps1.MayServe());
  // PS 0 fails: PS 1 takes over; PS 0 learns it was replaced.
  EXPECT_TRUE(on_ps1.TakeOver());
  on_ps0.Retire();
  EXPECT_TRUE(on_ps1.MayServe());
  EXPECT_FALSE(on_ps0.MayServe());
  // PS 0 rejoins from PS 1, then takes its shard back.
  EXPECT_TRUE(on_ps0.BeginRejoin());
  EXPECT_EQ(on_ps0.role(), Role::kRejoining);
  EXPECT_FALSE(on_ps0.MayServe());
  EXPECT_TRUE(on_ps0.Rejoined());
  EXPECT_EQ(on_ps0.role(), Role::kBackup);
  EXPECT_TRUE(on_ps1.HandBack());
  EXPECT_TRUE(on_ps0.Reinstate());
  EXPECT_EQ(on_ps0.role(), Role::kPrimary);
  EXPECT_EQ(on_ps1.role(), Role::kBackup);
  // Never both serving along the way: checked at each step above; and at
  // the end exactly one does.
  EXPECT_NE(on_ps0.MayServe(), on_ps1.MayServe());
}

TEST(ShardRoleTest, TransitionsFromOtherStatesMoveNothing) {
  const std::vector<Role> all = {Role::kPrimary, Role::kBackup,
                                 Role::kTakenOver, Role::kRetired,
                                 Role::kRejoining};
  for (Role from : all) {
    ShardRole r(from);
    EXPECT_EQ(r.TakeOver(), from == Role::kBackup) << ShardRole::Name(from);
    ShardRole h(from);
    EXPECT_EQ(h.HandBack(), from == Role::kTakenOver) << ShardRole::Name(from);
    ShardRole b(from);
    EXPECT_EQ(b.BeginRejoin(), from == Role::kRetired) << ShardRole::Name(from);
    ShardRole j(from);
    EXPECT_EQ(j.Rejoined(), from == Role::kRejoining) << ShardRole::Name(from);
    ShardRole i(from);
    // Reinstate: any copy that does not serve becomes the primary.
    EXPECT_EQ(i.Reinstate(), from != Role::kPrimary && from != Role::kTakenOver)
        << ShardRole::Name(from);
    if (from == Role::kTakenOver) {
      EXPECT_EQ(i.role(), Role::kTakenOver);
    }
  }
  // A repeated takeover (two failovers reported) moves once.
  ShardRole twice(Role::kBackup);
  EXPECT_TRUE(twice.TakeOver());
  EXPECT_FALSE(twice.TakeOver());
  EXPECT_EQ(twice.role(), Role::kTakenOver);
}

}  // namespace
}  // namespace psrt

#include "clients/cpp/ps_task_status.h"

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

TEST(PsTaskStatusTest, AnErrorCarriesItsPsThroughANewMessage) {
  const absl::Status s =
      WithPsTask(absl::UnavailableError("pull to PS 3 (h:1): down"), 3);
  EXPECT_EQ(PsTaskOf(s), 3);
  const absl::Status outcome = WithMessage(s, "pull failed [nothing applied]");
  EXPECT_EQ(outcome.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(outcome.message(), "pull failed [nothing applied]");
  EXPECT_EQ(PsTaskOf(outcome), 3);
}

TEST(PsTaskStatusTest, OkAndUnmarkedStatusesNameNoPs) {
  EXPECT_TRUE(WithPsTask(absl::OkStatus(), 1).ok());
  EXPECT_EQ(PsTaskOf(WithPsTask(absl::OkStatus(), 1)), std::nullopt);
  EXPECT_EQ(PsTaskOf(absl::InternalError("x")), std::nullopt);
}

}  // namespace
}  // namespace psrt

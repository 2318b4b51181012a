#include "util/grpc_status.h"

#include "gtest/gtest.h"

namespace psrt {
namespace {

TEST(GrpcStatusTest, EveryCodeMapsBothWaysWithItsMessage) {
  for (int code = 1; code <= 16; ++code) {
    const grpc::Status g(static_cast<grpc::StatusCode>(code), "what broke");
    const absl::Status a = FromGrpcStatus(g);
    EXPECT_EQ(static_cast<int>(a.code()), code);
    EXPECT_EQ(a.message(), "what broke");
    const grpc::Status back = ToGrpcStatus(a);
    EXPECT_EQ(static_cast<int>(back.error_code()), code);
    EXPECT_EQ(back.error_message(), "what broke");
  }
  // Names agree, not only numbers.
  EXPECT_EQ(
      FromGrpcStatus(grpc::Status(grpc::StatusCode::PERMISSION_DENIED, ""))
          .code(),
      absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ToGrpcStatus(absl::ResourceExhaustedError("")).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST(GrpcStatusTest, OkStaysOkAndContextPrefixesTheMessage) {
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK, "push").ok());
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  const absl::Status a = FromGrpcStatus(
      grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection refused"),
      "push to PS 1 (h2:2223)");
  EXPECT_EQ(a.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(a.message(), "push to PS 1 (h2:2223): connection refused");
}

TEST(GrpcStatusTest, CodesOutsideTheProtocolBecomeUnknown) {
  // 20: not a google.rpc.Code, yet a valid value of grpc::StatusCode (an
  // enum without a fixed type holds 0..31), as a newer peer could send.
  const grpc::Status g(static_cast<grpc::StatusCode>(20), "from the future");
  EXPECT_EQ(FromGrpcStatus(g).code(), absl::StatusCode::kUnknown);
  EXPECT_EQ(FromGrpcStatus(g).message(), "from the future");
  const absl::Status a(static_cast<absl::StatusCode>(42), "odd");
  EXPECT_EQ(ToGrpcStatus(a).error_code(), grpc::StatusCode::UNKNOWN);
}

}  // namespace
}  // namespace psrt

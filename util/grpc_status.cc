#include "util/grpc_status.h"

#include "absl/strings/str_cat.h"

namespace psrt {
namespace {

// google.rpc.Code's last value (UNAUTHENTICATED, 16).
constexpr int kLastCode = 16;

}  // namespace

absl::Status FromGrpcStatus(const grpc::Status& s, absl::string_view context) {
  if (s.ok()) return absl::OkStatus();
  const int code = static_cast<int>(s.error_code());
  const absl::StatusCode absl_code = code > 0 && code <= kLastCode
                                         ? static_cast<absl::StatusCode>(code)
                                         : absl::StatusCode::kUnknown;
  if (context.empty()) return absl::Status(absl_code, s.error_message());
  return absl::Status(absl_code,
                      absl::StrCat(context, ": ", s.error_message()));
}

grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  const int code = static_cast<int>(s.code());
  return grpc::Status(code > 0 && code <= kLastCode
                          ? static_cast<grpc::StatusCode>(code)
                          : grpc::StatusCode::UNKNOWN,
                      std::string(s.message()));
}

}  // namespace psrt

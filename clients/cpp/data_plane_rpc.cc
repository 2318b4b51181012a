#include "clients/cpp/data_plane_rpc.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/data_plane_call.h"
#include "util/grpc_status.h"

namespace psrt {
namespace {

// A pull's reply holds its response messages; as many as a response of
// this many bytes could (one piece header each) is the most read.
constexpr size_t kMaxReplyMessages = size_t{1} << 20;

// The request body for `messages`, in the lane's reusable memory.
absl::Span<const uint8_t> Encode(DataPlaneMethod method,
                                 absl::Span<const grpc::ByteBuffer> messages,
                                 std::vector<uint8_t>* scratch) {
  scratch->resize(DataPlaneCallBytes(messages));
  EncodeDataPlaneCall(method, messages, scratch->data());
  return *scratch;
}

}  // namespace

void DataPlanePushCall::Start(std::function<void()> on_done) {
  const absl::Time deadline = absl::Now() + timeout_;
  link_->Run([this, deadline, on_done = std::move(on_done)](
                 absl::StatusOr<DataPlaneLink::Lane> lane) {
    auto call = [&]() -> absl::StatusOr<std::string> {
      if (!lane.ok()) return lane.status();
      // The gradients leave from the messages' own memory.
      std::vector<grpc::Slice> slices;
      const std::vector<dataplane::Segment> body = DataPlaneCallSegments(
          DataPlaneMethod::kPush, *messages_, lane->scratch, &slices);
      return lane->client->Call(body, deadline);
    };
    const absl::StatusOr<std::string> answer = call();
    status_ = ToGrpcStatus(answer.status());
    if (answer.ok() && !response_.ParseFromString(*answer)) {
      status_ = grpc::Status(grpc::StatusCode::INTERNAL,
                             "unreadable PushResponse (data plane)");
    }
    on_done();
  });
}

void DataPlanePullCall::Start(std::function<void()> on_done) {
  link_->Run([this, on_done = std::move(on_done)](
                 absl::StatusOr<DataPlaneLink::Lane> lane) {
    status_ = lane.ok() ? Run(*lane) : ToGrpcStatus(lane.status());
    on_done();
  });
}

grpc::Status DataPlanePullCall::Run(const DataPlaneLink::Lane& lane) {
  const absl::Time deadline = absl::Now() + timeout_;
  std::vector<uint8_t> body;
  std::vector<uint8_t>* reply = lane.scratch;
  absl::Status called = lane.client->Call(
      Encode(DataPlaneMethod::kPull, {&request_, 1}, &body),
      [reply](uint64_t bytes) -> absl::StatusOr<absl::Span<uint8_t>> {
        reply->resize(bytes);
        return absl::MakeSpan(*reply);
      },
      deadline);
  if (!called.ok()) return ToGrpcStatus(called);
  absl::StatusOr<DataPlaneCall> messages =
      DecodeDataPlaneCall(*reply, kMaxReplyMessages);
  if (!messages.ok()) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        absl::StrCat("bad pull reply (data plane): ",
                                     messages.status().message()));
  }
  for (const grpc::ByteBuffer& message : messages->messages) {
    if (grpc::Status s = scatter_.Add(message); !s.ok()) return s;
  }
  return scatter_.Finish();
}

}  // namespace psrt

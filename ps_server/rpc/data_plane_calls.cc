// ParameterServerService's pushes, pulls and forwards (Replicate, from a
// connection a PS opened) that arrive over the data plane (dataplane/,
// data_planes.h). A call's body holds the messages its
// gRPC call would stream (proto/data_plane_call.h), read without a copy;
// from there it is the gRPC call's path: ReadPullRequest and
// MakePullResponder, NewPushHandler and FinishPush, the same checks,
// step barriers, de-duplication, forward to the backups and metrics. A
// wait (a SYNC step's barrier, the backups) holds no data-plane thread:
// the answer goes from the callback that ends it.
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/data_plane_call.h"
#include "ps_server/rpc/out_of_memory.h"
#include "ps_server/rpc/ps_service.h"
#include "util/grpc_status.h"

namespace psrt {
namespace {

// A push's messages at most: each carries one item at least.
constexpr size_t kMaxPushMessages = size_t{1} << 20;

// A pull's response messages as one reply body (data_plane_call.h),
// sent from the messages' own memory: only the framing is written.
absl::StatusOr<dataplane::Reply> PullReply(
    std::vector<grpc::ByteBuffer> messages) {
  return AnswerOutOfMemory("Pull", [&]() -> absl::StatusOr<dataplane::Reply> {
    struct Body {
      std::vector<grpc::ByteBuffer> messages;
      std::vector<uint8_t> framing;
      std::vector<grpc::Slice> slices;
    };
    auto body = std::make_shared<Body>();
    body->messages = std::move(messages);
    std::vector<dataplane::Segment> segments = DataPlaneCallSegments(
        DataPlaneMethod::kPull, body->messages, &body->framing, &body->slices);
    return dataplane::Reply(std::move(segments), std::move(body));
  });
}

const char* MethodName(DataPlaneMethod method) {
  switch (method) {
    case DataPlaneMethod::kPull:
      return "Pull";
    case DataPlaneMethod::kReplicate:
      return "Replicate";
    case DataPlaneMethod::kPush:
      break;
  }
  return "Push";
}

}  // namespace

void ParameterServerService::FailDataPlane(const char* method,
                                           const absl::Status& status,
                                           dataplane::Respond respond) {
  grpc::Status answer = Fail(method, status);
  absl::Status failure = FromGrpcStatus(answer, "");
  if (transfer_ == nullptr ||
      !transfer_->HoldRefusal(method, status,
                              [respond, failure] { respond(failure); })) {
    respond(failure);
  }
}

void ParameterServerService::ServeDataPlane(dataplane::Request request,
                                            DataPlaneCaller caller,
                                            dataplane::Respond respond) {
  // The messages keep the body (and its pooled buffer) for as long as
  // they live: a push forwarded to backups outlives this call.
  absl::StatusOr<DataPlaneCall> call = DecodeDataPlaneCall(
      request.bytes, kMaxPushMessages, std::move(request.owner));
  absl::Status s = call.status();
  const char* method = s.ok() ? MethodName(call->method) : "Push";
  metrics_
      ->GetCounter("psrt_data_plane_calls_total",
                   "Pushes, pulls and forwards from primaries (Replicate) "
                   "that came over the data plane, by method "
                   "(psrt_requests_total counts the pushes and pulls too)",
                   {{"method", method}})
      ->Increment();
  // A forward is served while this PS waits for its own backups, as over
  // gRPC; pushes and pulls are not.
  if (s.ok() && call->method != DataPlaneMethod::kReplicate) {
    s = CheckNotReplaced();
  }
  if (s.ok() && call->messages.empty()) {
    s = absl::InvalidArgumentError(
        absl::StrCat("data-plane ", method, " carries no message"));
  }
  if (s.ok() && call->method == DataPlaneMethod::kReplicate &&
      !caller.has_value()) {
    // A worker's connection, even with the token: PS-to-PS calls need a
    // connection a proven PS opened, as Replicate over gRPC needs the
    // PS's proof.
    s = absl::PermissionDeniedError(
        "data-plane Replicate on a connection no PS opened (OpenDataPlane "
        "from_peer): PS-to-PS calls only");
  }
  if (s.ok() && call->method == DataPlaneMethod::kPull &&
      call->messages.size() != 1) {
    s = absl::InvalidArgumentError(
        absl::StrCat("data-plane Pull carries ", call->messages.size(),
                     " messages; a pull's request is one"));
  }
  if (!s.ok()) {
    FailDataPlane(method, s, std::move(respond));
    return;
  }
  switch (call->method) {
    case DataPlaneMethod::kPull:
      ServeDataPlanePull(std::move(call->messages[0]), std::move(respond));
      return;
    case DataPlaneMethod::kReplicate:
      ServeDataPlaneReplicate(std::move(call->messages), *caller,
                              std::move(respond));
      return;
    case DataPlaneMethod::kPush:
      ServeDataPlanePush(std::move(call->messages), std::move(respond));
      return;
  }
}

void ParameterServerService::ServeDataPlanePull(grpc::ByteBuffer request,
                                                dataplane::Respond respond) {
  struct Pull {
    FrameReader frame;
    StepCoordinator* coordinator = nullptr;
    dataplane::Respond respond;
    absl::Time start = absl::Now();
  };
  auto pull = std::make_shared<Pull>();
  pull->respond = std::move(respond);
  PullRequestHeader header;
  if (absl::Status s =
          ReadPullRequest(request, &pull->frame, &header, &pull->coordinator);
      !s.ok()) {
    FailDataPlane("Pull", s, std::move(pull->respond));
    return;
  }
  // Runs at once, or (SYNC, SSP) on the thread of the push that let the
  // pull proceed.
  auto proceed = [this, pull](absl::Status ready) {
    absl::StatusOr<std::unique_ptr<PullResponder>> responder =
        ready.ok() ? MakePullResponder(pull->frame, pull->coordinator) : ready;
    absl::Status s = responder.status();
    std::vector<grpc::ByteBuffer> messages;
    while (s.ok()) {
      messages.emplace_back();
      s = AnswerOutOfMemory(
          "Pull", [&] { return (*responder)->Next(&messages.back()); });
      if ((*responder)->done()) break;
    }
    absl::StatusOr<dataplane::Reply> reply =
        s.ok() ? PullReply(std::move(messages))
               : absl::StatusOr<dataplane::Reply>(s);
    pull_.latency->Observe(absl::ToDoubleSeconds(absl::Now() - pull->start));
    if (!reply.ok()) {
      FailDataPlane("Pull", reply.status(), std::move(pull->respond));
      return;
    }
    pull->respond(*std::move(reply));
  };
  if (pull->coordinator->WaitForPull(header, proceed) == 0) {
    proceed(absl::OkStatus());
  }
}

void ParameterServerService::ServeDataPlanePush(
    std::vector<grpc::ByteBuffer> messages, dataplane::Respond respond) {
  struct Push {
    std::unique_ptr<PushHandler> handler;
    dataplane::Respond respond;
    absl::Time start = absl::Now();
  };
  auto push = std::make_shared<Push>();
  push->handler = NewPushHandler();
  push->respond = std::move(respond);
  for (const grpc::ByteBuffer& message : messages) {
    absl::Status s = AnswerOutOfMemory(
        "Push", [&] { return push->handler->AddMessage(message); });
    if (!s.ok()) {
      FailDataPlane("Push", s, std::move(push->respond));
      return;
    }
  }
  // `push` (and its handler) lives in the callback until it ran.
  FinishPush(&push->handler, [this, push](absl::StatusOr<PushResponse> result) {
    push_.latency->Observe(absl::ToDoubleSeconds(absl::Now() - push->start));
    if (!result.ok()) {
      FailDataPlane("Push", result.status(), std::move(push->respond));
      return;
    }
    auto bytes = std::make_shared<std::string>(result->SerializeAsString());
    push->respond(dataplane::Reply{
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(bytes->data()),
                            bytes->size()),
        bytes});
  });
}

}  // namespace psrt

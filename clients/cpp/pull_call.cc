#include "clients/cpp/pull_call.h"

#include <utility>

namespace psrt {

PullCall::PullCall(PsConnection* connection, grpc::ByteBuffer request,
                   const std::vector<PullTarget>* targets,
                   absl::Duration timeout)
    : connection_(connection),
      request_(std::move(request)),
      timeout_(timeout),
      scatter_(targets) {}

void PullCall::Start(std::function<void()> on_done) {
  on_done_ = std::move(on_done);
  context_.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  const int channel = connection_->NextChannel();
  grpc::internal::ClientCallbackReaderFactory<grpc::ByteBuffer>::Create(
      connection_->channel(channel), connection_->pull_method(channel),
      &context_, &request_, this);
  StartRead(&message_);
  StartCall();
}

void PullCall::OnReadDone(bool ok) {
  if (!ok) return;  // end of stream; OnDone follows
  error_ = scatter_.Add(message_);
  if (!error_.ok()) {
    context_.TryCancel();
    return;
  }
  StartRead(&message_);
}

void PullCall::OnDone(const grpc::Status& status) {
  status_ = error_.ok() ? status : error_;
  if (status_.ok()) status_ = scatter_.Finish();
  auto done = std::move(on_done_);
  done();
}

}  // namespace psrt

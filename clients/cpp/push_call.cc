#include "clients/cpp/push_call.h"

#include "proto/byte_buffer_bytes.h"

namespace psrt {

PushCall::PushCall(PsConnection* connection,
                   const std::vector<grpc::ByteBuffer>* messages,
                   absl::Duration timeout)
    : connection_(connection), messages_(messages), timeout_(timeout) {}

void PushCall::Start(std::function<void()> on_done) {
  on_done_ = std::move(on_done);
  context_.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  const int channel = connection_->NextChannel();
  grpc::internal::ClientCallbackWriterFactory<grpc::ByteBuffer>::Create(
      connection_->channel(channel), connection_->push_method(channel),
      &context_, &response_, this);
  WriteNext();
  StartCall();
}

void PushCall::WriteNext() {
  const grpc::ByteBuffer* message = &(*messages_)[next_++];
  if (next_ == messages_->size()) {
    StartWriteLast(message, grpc::WriteOptions());
  } else {
    StartWrite(message);
  }
}

void PushCall::OnWriteDone(bool ok) {
  // A failed write means the call is over; OnDone reports why.
  if (ok && next_ < messages_->size()) WriteNext();
}

void PushCall::OnDone(const grpc::Status& status) {
  status_ = status;
  if (status_.ok()) {
    std::string bytes;
    if (!ByteBufferBytes(response_, &bytes) ||
        !parsed_.ParseFromString(bytes)) {
      status_ =
          grpc::Status(grpc::StatusCode::INTERNAL, "unreadable PushResponse");
    }
  }
  auto done = std::move(on_done_);
  done();
}

}  // namespace psrt

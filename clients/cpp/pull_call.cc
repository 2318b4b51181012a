#include "clients/cpp/pull_call.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "proto/frame_reader.h"

namespace psrt {

PullCall::PullCall(PsConnection* connection, grpc::ByteBuffer request,
                   const std::vector<PullTarget>* targets,
                   absl::Duration timeout)
    : connection_(connection),
      request_(std::move(request)),
      targets_(targets),
      timeout_(timeout),
      received_(targets->size(), 0) {}

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
  if (!Scatter()) {
    context_.TryCancel();
    return;
  }
  StartRead(&message_);
}

bool PullCall::Scatter() {
  FrameReader frame;
  PullResponseHeader header;
  absl::Status s = frame.Parse(message_);
  if (s.ok()) s = frame.ParseHeader(&header);
  if (!s.ok()) {
    error_ = grpc::Status(grpc::StatusCode::INTERNAL,
                          absl::StrCat("bad pull response: ", s.message()));
    return false;
  }
  for (const auto& piece : header.pieces()) {
    if (piece.item() < 0 ||
        piece.item() >= static_cast<int>(targets_->size()) ||
        piece.values_payload() < 0 ||
        piece.values_payload() >= frame.num_payloads()) {
      error_ = grpc::Status(grpc::StatusCode::INTERNAL,
                            "bad pull response: piece names no item/payload");
      return false;
    }
    const PullTarget& t = (*targets_)[piece.item()];
    const PlannedItem& item = *t.item;
    const PayloadView values = frame.payload(piece.values_payload());
    const int64_t floats = static_cast<int64_t>(values.size() / sizeof(float));
    const int64_t width = item.width();
    const bool dense = item.layout->kind() == DENSE;
    if (values.size() % sizeof(float) != 0 || piece.first_float() < 0 ||
        piece.first_float() + floats > t.floats ||
        (!dense && (piece.first_float() % width != 0 || floats % width != 0))) {
      error_ = grpc::Status(
          grpc::StatusCode::INTERNAL,
          absl::StrCat("bad pull response for '", item.layout->spec.name(),
                       "' shard ", item.shard, ": ", floats, " floats at ",
                       piece.first_float(), " of ", t.floats));
      return false;
    }
    if (dense) {
      char* out = reinterpret_cast<char*>(item.dense_out + t.first +
                                          piece.first_float());
      values.ForEachChunk([&](const char* p, size_t n) {
        std::memcpy(out, p, n);
        out += n;
      });
    } else {
      const int64_t first_id = t.first + piece.first_float() / width;
      ForEachRow(values, width, [&](size_t row, const float* v) {
        std::memcpy(
            item.rows_out +
                static_cast<int64_t>(item.out_rows[first_id + row]) * width,
            v, width * sizeof(float));
      });
    }
    received_[piece.item()] += floats;
  }
  return true;
}

void PullCall::OnDone(const grpc::Status& status) {
  status_ = error_.ok() ? status : error_;
  if (status_.ok()) {
    for (size_t i = 0; i < targets_->size(); ++i) {
      if (received_[i] != (*targets_)[i].floats) {
        status_ = grpc::Status(
            grpc::StatusCode::INTERNAL,
            absl::StrCat("pull response for '",
                         (*targets_)[i].item->layout->spec.name(), "' shard ",
                         (*targets_)[i].item->shard, " held ", received_[i],
                         " of ", (*targets_)[i].floats, " floats"));
        break;
      }
    }
  }
  auto done = std::move(on_done_);
  done();
}

}  // namespace psrt

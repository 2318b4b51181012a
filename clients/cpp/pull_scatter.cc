#include "clients/cpp/pull_scatter.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/frame_reader.h"
#include "util/wire_dtype.h"

namespace psrt {
namespace {

// Copies the payload's rows (`width` floats each) to out + rows[i] * width.
// Rows whose destinations are consecutive -- all of them when the ids were
// unique and went to one shard -- are copied as one block.
void ScatterRows(const PayloadView& values, int64_t width, const int32_t* rows,
                 float* out) {
  const size_t row_bytes = width * sizeof(float);
  std::vector<char> partial(row_bytes);
  size_t filled = 0;
  size_t r = 0;
  char* base = reinterpret_cast<char*>(out);
  values.ForEachChunk([&](const char* p, size_t n) {
    if (filled > 0) {
      const size_t take = std::min(row_bytes - filled, n);
      std::memcpy(partial.data() + filled, p, take);
      filled += take;
      p += take;
      n -= take;
      if (filled < row_bytes) return;
      std::memcpy(base + static_cast<size_t>(rows[r++]) * row_bytes,
                  partial.data(), row_bytes);
      filled = 0;
    }
    const size_t whole = n / row_bytes;
    for (size_t i = 0; i < whole;) {
      size_t run = 1;
      while (i + run < whole &&
             rows[r + run] == rows[r] + static_cast<int32_t>(run)) {
        ++run;
      }
      std::memcpy(base + static_cast<size_t>(rows[r]) * row_bytes,
                  p + i * row_bytes, run * row_bytes);
      i += run;
      r += run;
    }
    filled = n - whole * row_bytes;
    std::memcpy(partial.data(), p + whole * row_bytes, filled);
  });
}

}  // namespace

grpc::Status PullScatter::Add(const grpc::ByteBuffer& message) {
  FrameReader frame;
  PullResponseHeader header;
  absl::Status s = frame.Parse(message);
  if (s.ok()) s = frame.ParseHeader(&header);
  if (!s.ok()) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        absl::StrCat("bad pull response: ", s.message()));
  }
  sync_step_ = std::min(sync_step_, header.sync_step());
  for (const auto& piece : header.pieces()) {
    if (piece.item() < 0 ||
        piece.item() >= static_cast<int>(targets_->size()) ||
        piece.values_payload() < 0 ||
        piece.values_payload() >= frame.num_payloads()) {
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          "bad pull response: piece names no item/payload");
    }
    const PullTarget& t = (*targets_)[piece.item()];
    const PlannedItem& item = *t.item;
    PayloadView values = frame.payload(piece.values_payload());
    // 16-bit values are widened first; the rest is as for float32.
    std::unique_ptr<float[]> widened;
    if (piece.dtype() != FLOAT32) {
      if (!WidenValues(piece.dtype(), &values, &widened)) {
        return grpc::Status(
            grpc::StatusCode::INTERNAL,
            absl::StrCat("bad pull response for '", item.layout->spec.name(),
                         "': dtype ", piece.dtype(), " with ", values.size(),
                         " bytes"));
      }
    }
    const int64_t floats = static_cast<int64_t>(values.size() / sizeof(float));
    const int64_t width = item.width();
    const bool dense = item.layout->kind() == DENSE;
    if (values.size() % sizeof(float) != 0 || piece.first_float() < 0 ||
        piece.first_float() + floats > t.floats ||
        (!dense && (piece.first_float() % width != 0 || floats % width != 0))) {
      return grpc::Status(
          grpc::StatusCode::INTERNAL,
          absl::StrCat("bad pull response for '", item.layout->spec.name(),
                       "' shard ", item.shard, ": ", floats, " floats at ",
                       piece.first_float(), " of ", t.floats));
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
      ScatterRows(values, width, item.out_rows.data() + first_id,
                  item.rows_out);
    }
    received_[piece.item()] += floats;
  }
  return grpc::Status::OK;
}

grpc::Status PullScatter::Finish() const {
  for (size_t i = 0; i < targets_->size(); ++i) {
    if (received_[i] != (*targets_)[i].floats) {
      return grpc::Status(
          grpc::StatusCode::INTERNAL,
          absl::StrCat("pull response for '",
                       (*targets_)[i].item->layout->spec.name(), "' shard ",
                       (*targets_)[i].item->shard, " held ", received_[i],
                       " of ", (*targets_)[i].floats, " floats"));
    }
  }
  return grpc::Status::OK;
}

}  // namespace psrt

#include "ps_server/rpc/pull_handler.h"

#include <algorithm>

#include "proto/buffer_pool.h"
#include "proto/frame_packer.h"
#include "util/wire_dtype.h"

namespace psrt {
namespace {
constexpr size_t kDefaultMessageBytes = 1 << 20;
constexpr size_t kMinMessageBytes = 4 << 10;
}  // namespace

absl::StatusOr<std::unique_ptr<PullResponder>> PullResponder::Create(
    const ShardStore& store, const FrameReader& request,
    size_t max_message_bytes) {
  PullRequestHeader header;
  if (absl::Status s = request.ParseHeader(&header); !s.ok()) return s;
  std::unique_ptr<PullResponder> r(new PullResponder());
  r->items_.resize(header.items_size());
  for (int i = 0; i < header.items_size(); ++i) {
    absl::Status s = ResolveItem(store, header.items(i), request,
                                 RequestKind::kPull, &r->items_[i]);
    if (!s.ok()) return s;
  }
  const size_t asked = header.max_response_message_bytes() > 0
                           ? header.max_response_message_bytes()
                           : kDefaultMessageBytes;
  r->limit_ = std::clamp(asked, kMinMessageBytes, max_message_bytes);
  // A range is one tensor (a layer's weights): it is copied now, under one
  // lock, so the whole item is of one version however many messages carry
  // it. Rows are independent: each message's rows are read as it is
  // packed, without a second copy.
  r->range_values_.resize(r->items_.size());
  r->range_versions_.resize(r->items_.size());
  for (size_t i = 0; i < r->items_.size(); ++i) {
    const ResolvedItem& item = r->items_[i];
    const size_t bytes = item.value_floats() * sizeof(float);
    r->value_bytes_ +=
        static_cast<int64_t>(item.value_floats() * WireValueBytes(item.dtype));
    if (!item.by_range) {
      r->rows_ += static_cast<int64_t>(item.ids.size());
      continue;
    }
    absl::StatusOr<PooledBuffer> space =
        BufferPool::Default().TryAcquire(bytes);
    if (!space.ok()) return space.status();
    PooledBuffer values = *std::move(space);
    absl::StatusOr<int64_t> version = item.target().Read(
        item.slice(), reinterpret_cast<float*>(values.data()));
    if (!version.ok()) return version.status();
    r->range_versions_[i] = *version;
    r->range_values_[i] = std::move(values).ReleaseAsSlice();
    r->rows_ += 1;
  }
  return r;
}

absl::Status PullResponder::Next(grpc::ByteBuffer* message) {
  FramePacker<PullResponseHeader> packer(limit_);
  while (item_ < items_.size()) {
    const ResolvedItem& item = items_[item_];
    // Sizes and offsets here count wire bytes of the item's dtype.
    const size_t value_bytes = WireValueBytes(item.dtype);
    const size_t row_bytes =
        item.by_range ? value_bytes
                      : item.variable->layout->row_width * value_bytes;
    const size_t total = item.value_floats() * value_bytes;
    if (!packer.empty() && packer.room() < row_bytes) break;
    const size_t take =
        std::min(total - offset_,
                 std::max(row_bytes, packer.room() / row_bytes * row_bytes));
    auto* piece = packer.header()->add_pieces();
    piece->set_item(static_cast<int>(item_));
    piece->set_first_float(static_cast<int64_t>(offset_ / value_bytes));
    piece->set_dtype(item.dtype);
    const size_t values = take / value_bytes;
    if (item.by_range) {
      piece->set_version(range_versions_[item_]);
      const size_t first = offset_ / value_bytes * sizeof(float);
      if (item.dtype == FLOAT32) {
        piece->set_values_payload(
            packer.AddPayload(range_values_[item_].sub(first, first + take)));
      } else {
        absl::StatusOr<PooledBuffer> space =
            BufferPool::Default().TryAcquire(take);
        if (!space.ok()) return space.status();
        PooledBuffer wire = *std::move(space);
        NarrowValues(item.dtype,
                     reinterpret_cast<const float*>(
                         range_values_[item_].begin() + first),
                     values, wire.data());
        piece->set_values_payload(
            packer.AddPayload(std::move(wire).ReleaseAsSlice()));
      }
    } else {
      const size_t first_row = offset_ / row_bytes;
      ShardSlice slice;
      slice.ids =
          absl::MakeConstSpan(item.ids).subspan(first_row, take / row_bytes);
      absl::StatusOr<PooledBuffer> space =
          BufferPool::Default().TryAcquire(take);
      if (!space.ok()) return space.status();
      PooledBuffer rows = *std::move(space);
      // Read as float32 (into a buffer of its own for a narrower dtype).
      PooledBuffer floats;
      if (item.dtype != FLOAT32) {
        space = BufferPool::Default().TryAcquire(values * sizeof(float));
        if (!space.ok()) return space.status();
        floats = *std::move(space);
      }
      float* read_to = reinterpret_cast<float*>(
          item.dtype == FLOAT32 ? rows.data() : floats.data());
      absl::StatusOr<int64_t> version = item.target().Read(slice, read_to);
      if (!version.ok()) return version.status();
      piece->set_version(*version);
      if (item.dtype != FLOAT32) {
        NarrowValues(item.dtype, read_to, values, rows.data());
      }
      piece->set_values_payload(
          packer.AddPayload(std::move(rows).ReleaseAsSlice()));
    }
    offset_ += take;
    if (offset_ == total) {
      ++item_;
      offset_ = 0;
      range_values_[item_ - 1] = grpc::Slice();  // sent; let the pool have it
    }
  }
  packer.Flush([this](PullResponseHeader* header, size_t) {
    header->set_sync_step(sync_step_);
  });
  *message = std::move(packer.messages().back());
  return absl::OkStatus();
}

}  // namespace psrt

#include "ps_server/pull_handler.h"

#include <algorithm>

#include "proto/buffer_pool.h"
#include "proto/frame_packer.h"
#include "ps_server/request_item.h"

namespace psrt {
namespace {

constexpr size_t kDefaultMessageBytes = 1 << 20;
constexpr size_t kMinMessageBytes = 4 << 10;

// Packs pulled values into response messages of at most `limit` payload
// bytes, splitting an item's values at row boundaries; a row larger than the
// limit travels alone.
class ResponsePacker {
 public:
  explicit ResponsePacker(size_t limit) : packer_(limit) {}

  void Add(int item, int64_t version, const grpc::Slice& values,
           size_t row_bytes) {
    size_t begin = 0;
    do {
      if (!packer_.empty() && packer_.room() < row_bytes) packer_.Flush();
      const size_t take =
          std::min(values.size() - begin,
                   std::max(row_bytes, packer_.room() / row_bytes * row_bytes));
      auto* piece = packer_.header()->add_pieces();
      piece->set_item(item);
      piece->set_first_float(static_cast<int64_t>(begin / sizeof(float)));
      piece->set_version(version);
      piece->set_values_payload(
          packer_.AddPayload(values.sub(begin, begin + take)));
      begin += take;
    } while (begin < values.size());
  }

  std::vector<grpc::ByteBuffer> Finish() {
    if (!packer_.empty() || packer_.messages().empty()) packer_.Flush();
    return std::move(packer_.messages());
  }

 private:
  FramePacker<PullResponseHeader> packer_;
};

}  // namespace

absl::Status HandlePull(const ShardStore& store, const FrameReader& request,
                        size_t max_message_bytes, PullResult* result) {
  PullRequestHeader header;
  if (absl::Status s = request.ParseHeader(&header); !s.ok()) return s;
  std::vector<ResolvedItem> items(header.items_size());
  for (int i = 0; i < header.items_size(); ++i) {
    absl::Status s = ResolveItem(store, header.items(i), request,
                                 RequestKind::kPull, &items[i]);
    if (!s.ok()) return s;
  }
  size_t limit = header.max_response_message_bytes() > 0
                     ? header.max_response_message_bytes()
                     : kDefaultMessageBytes;
  limit = std::clamp(limit, kMinMessageBytes, max_message_bytes);

  ResponsePacker packer(limit);
  for (size_t i = 0; i < items.size(); ++i) {
    const ResolvedItem& item = items[i];
    const size_t bytes = item.value_floats() * sizeof(float);
    PooledBuffer values = BufferPool::Default().Acquire(bytes);
    float* out = reinterpret_cast<float*>(values.data());
    int64_t version;
    size_t row_bytes;
    if (item.variable->is_dense()) {
      version =
          item.variable->dense[item.shard]->Read(item.offset, item.count, out);
      row_bytes = sizeof(float);
      result->rows += 1;
    } else {
      version = item.variable->rows[item.shard]->Gather(item.ids, out);
      row_bytes = item.variable->layout->row_width * sizeof(float);
      result->rows += static_cast<int64_t>(item.ids.size());
    }
    result->value_bytes += static_cast<int64_t>(bytes);
    packer.Add(static_cast<int>(i), version, std::move(values).ReleaseAsSlice(),
               row_bytes);
  }
  result->messages = packer.Finish();
  return absl::OkStatus();
}

}  // namespace psrt

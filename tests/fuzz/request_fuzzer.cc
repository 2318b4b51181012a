// Pull and Push request bytes, as a hostile client sends them, through the
// server's frame reader and request validation (and, for pushes that pass,
// the all-or-nothing apply). The first byte picks the method; a push's
// bytes are stream messages, each after its length (2 bytes, little-endian).
#include <cstdint>
#include <cstring>

#include "proto/frame_reader.h"
#include "ps_server/rpc/pull_handler.h"
#include "ps_server/rpc/push_dedup.h"
#include "ps_server/rpc/push_handler.h"
#include "tests/fuzz/fuzz_store.h"

namespace {

grpc::ByteBuffer Buffer(const uint8_t* data, size_t n) {
  grpc::Slice slice(data, n);
  return grpc::ByteBuffer(&slice, 1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static psrt::ShardStore* store = psrt::MakeFuzzStore().release();
  static psrt::PushDedup* dedup = new psrt::PushDedup();
  if (size == 0) return 0;
  const uint8_t method = data[0];
  ++data;
  --size;
  if (method % 2 == 0) {
    psrt::FrameReader frame;
    if (!frame.Parse(Buffer(data, size)).ok()) return 0;
    psrt::PullRequestHeader header;
    if (!frame.ParseHeader(&header).ok()) return 0;
    auto responder = psrt::PullResponder::Create(*store, frame, 4096);
    if (!responder.ok()) return 0;
    grpc::ByteBuffer message;
    for (int i = 0; i < 10000 && !(*responder)->done(); ++i) {
      if (!(*responder)->Next(&message).ok()) break;
    }
    return 0;
  }
  psrt::PushHandler push(store, dedup, 1 << 20);
  while (size >= 2) {
    const size_t n = std::min<size_t>(size - 2, data[0] | (data[1] << 8));
    if (!push.AddMessage(Buffer(data + 2, n)).ok()) return 0;
    data += 2 + n;
    size -= 2 + n;
  }
  (void)push.Finish();
  return 0;
}

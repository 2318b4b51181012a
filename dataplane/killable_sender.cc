// A data-plane client that sends large requests to a server until it is
// killed: data_plane_test kills it mid-body (SIGKILL) to show that a
// sender dying in the middle of a transfer leaves the server serving.
// Prints "connected" once its connection is open, then "call N" after
// each call, so that the test can kill it while a body is in flight.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cli/help.h"
#include "dataplane/data_plane_client.h"
#include "gflags/gflags.h"

DEFINE_string(provider, "tcp", "libfabric provider.");
DEFINE_string(address_hex, "", "The server's fabric address, hex.");
DEFINE_uint32(connection_id, 0, "The challenge's connection id.");
DEFINE_string(nonce_hex, "", "The challenge's nonce, hex.");
DEFINE_string(token, "", "The cluster token.");
DEFINE_uint64(request_bytes, 8 << 20, "Bytes of every request.");
DEFINE_uint64(piece_bytes, 131072, "A request is sent in pieces this large.");

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "killable_sender --address_hex=H --connection_id=N --nonce_hex=H: "
      "sends requests to a data-plane server until killed");
  psrt::HandleHelpFlag(argc, argv, "dataplane/");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  psrt::dataplane::FabricOptions fabric;
  fabric.provider = FLAGS_provider;
  psrt::dataplane::Challenge challenge;
  challenge.connection_id = FLAGS_connection_id;
  challenge.nonce = absl::HexStringToBytes(FLAGS_nonce_hex);
  auto client = psrt::dataplane::DataPlaneClient::Connect(
      fabric, absl::HexStringToBytes(FLAGS_address_hex), challenge, FLAGS_token,
      absl::Now() + absl::Seconds(10));
  if (!client.ok()) {
    std::fprintf(stderr, "killable_sender: %s\n",
                 client.status().ToString().c_str());
    return 1;
  }
  std::printf("connected\n");
  std::fflush(stdout);
  std::vector<uint8_t> request(FLAGS_request_bytes);
  for (size_t i = 0; i < request.size(); ++i) {
    request[i] = static_cast<uint8_t>(i * 7);
  }
  std::vector<psrt::dataplane::Segment> pieces;
  for (size_t at = 0; at < request.size(); at += FLAGS_piece_bytes) {
    pieces.push_back(
        absl::MakeConstSpan(request).subspan(at, FLAGS_piece_bytes));
  }
  for (int call = 1;; ++call) {
    auto reply = (*client)->Call(pieces, absl::Now() + absl::Seconds(10));
    if (!reply.ok()) {
      std::fprintf(stderr, "killable_sender: call %d: %s\n", call,
                   reply.status().ToString().c_str());
      return 1;
    }
    std::printf("call %d\n", call);
    std::fflush(stdout);
  }
}

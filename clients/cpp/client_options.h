// How a psrt::Client connects and calls: addresses, deadlines, retries,
// message size, channels, security (see client.h).
#ifndef PSRT_CLIENTS_CPP_CLIENT_OPTIONS_H_
#define PSRT_CLIENTS_CPP_CLIENT_OPTIONS_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/ps.pb.h"
#include "security/security.h"
#include "util/clock.h"

namespace psrt {

struct ClientOptions {
  // host:port of every PS task, in task order.
  std::vector<std::string> ps_addresses;
  // Deadline of each attempt of a call.
  absl::Duration call_timeout = absl::Seconds(60);
  // Attempts per call for retryable failures (UNAVAILABLE).
  int max_attempts = 6;
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);
  // With servers run with --replicas > 1: how long a failing call keeps
  // being retried (beyond max_attempts), redirected to the backup that
  // takes over its PS's shards (failover takes a few seconds).
  absl::Duration failover_wait = absl::Seconds(30);
  // Largest message sent or asked for; tensors are split into messages of
  // this size (one embedding row at least).
  size_t message_bytes = 1 << 20;
  // TCP connections per PS; calls are spread over them (and as many
  // data-plane connections).
  int channels_per_ps = 2;
  // How pushes and pulls travel (clients/cpp/data_plane_link.h): "grpc",
  // or "fabric" (libfabric, where the PS serves it and a provider opens
  // here; else gRPC, said once in the log).
  std::string data_plane = "fabric";
  // The data plane's providers this client may open: "tcp"; "shm" too
  // for shared memory to a PS on this host (in another process), where
  // the PS serves it (not by default: docs/architecture.md, dataplane/).
  std::vector<std::string> data_plane_providers = {"tcp"};
  // Identifies this worker in push headers (sync modes); -1 if none.
  int worker_index = -1;
  // With 2 PS run with --replicas > 1, the worker this client votes as,
  // beside the PS, granting them leases, so that one can take over from
  // the other (ps_server/replication/worker_witness.h); a PS serves while
  // most voters grant it one. One client per worker should; -1: none.
  // kSameAsWorker: worker_index.
  static constexpr int kSameAsWorker = -2;
  int witness_index = kSameAsWorker;
  // TLS (tls_ca_file; with cert/key for mutual TLS) and the auth token sent
  // with every call. Empty: plaintext, no token.
  SecurityOptions security;
  // How pulled values and pushed gradients travel (proto/ps.proto): the
  // servers keep float32 whatever travels. FLOAT16 clamps finite
  // gradients and values beyond +-65504 (util/wire_dtype.h).
  WireDtype wire_dtype = FLOAT32;
  // What the retries' backoff, failover_wait, the routing's refresh
  // interval and a creation's waits are timed by (it must outlive the
  // client); null: the real clock. Each attempt's deadline is gRPC's, on
  // real time.
  Clock* clock = nullptr;
};

}  // namespace psrt

#endif  // PSRT_CLIENTS_CPP_CLIENT_OPTIONS_H_

// The baseline ps_bench compares every case with: a raw loopback TCP stream
// between two processes moving the same bytes per operation. The sender
// writes the operation's bytes in 1 MiB writes; the receiver reads them into
// one reused buffer, touches every byte, and answers each operation with a
// one-byte ack.
#ifndef PSRT_TOOLS_PS_BENCH_TCP_BASELINE_H_
#define PSRT_TOOLS_PS_BENCH_TCP_BASELINE_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace psrt {

struct TcpBaselineResult {
  double ops_per_s = 0;
  double gbytes_per_s = 0;
};

// Forks a receiver process, runs operations of `bytes_per_op` for about
// `duration` (after a short warm-up), and reaps the receiver.
absl::StatusOr<TcpBaselineResult> MeasureTcpBaseline(size_t bytes_per_op,
                                                     absl::Duration duration);

}  // namespace psrt

#endif  // PSRT_TOOLS_PS_BENCH_TCP_BASELINE_H_

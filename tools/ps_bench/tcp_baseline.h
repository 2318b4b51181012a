// The baseline ps_bench compares every case with: a raw loopback TCP stream
// between two processes moving the same bytes per operation. The sender
// writes the operation's bytes in 1 MiB writes; the receiver reads them into
// one reused buffer, touches every cache line of it (TouchEveryCacheLine),
// and answers each operation with a one-byte ack. ps_bench checks it against
// iperf3 in the same run (iperf3_check.h): a baseline slower than the socket
// would make every ratio against it a false claim.
#ifndef PSRT_TOOLS_PS_BENCH_TCP_BASELINE_H_
#define PSRT_TOOLS_PS_BENCH_TCP_BASELINE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace psrt {

// The sender's write size (operations smaller than it are one write).
inline constexpr size_t kTcpBaselineWriteBytes = size_t{1} << 20;

struct TcpBaselineResult {
  double ops_per_s = 0;
  double gbytes_per_s = 0;
};

// The sum of the first 8 bytes (a little-endian word) of each 64-byte line
// of `data[0, n)`, plus its last byte: what the baseline's receiver does
// with what it receives, so every line is loaded and no load is skipped.
uint64_t TouchEveryCacheLine(const char* data, size_t n);

// Forks a receiver process, runs operations of `bytes_per_op` for about
// `duration` (after a short warm-up), and reaps the receiver.
absl::StatusOr<TcpBaselineResult> MeasureTcpBaseline(size_t bytes_per_op,
                                                     absl::Duration duration);

}  // namespace psrt

#endif  // PSRT_TOOLS_PS_BENCH_TCP_BASELINE_H_

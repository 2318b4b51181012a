// The independent check on ps_bench's raw TCP baseline: iperf3 moving bytes
// over loopback in the same run. A baseline well below iperf3 is a slow
// baseline, and every ratio measured against it would overstate psrt.
#ifndef PSRT_TOOLS_PS_BENCH_IPERF3_CHECK_H_
#define PSRT_TOOLS_PS_BENCH_IPERF3_CHECK_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace psrt {

// Runs `iperf3_binary` as a one-off server on a free loopback port and as a
// client sending to it in writes of `write_bytes` (iperf3 -l; its default,
// 128 KiB, ran 0.57x of 1 MiB writes here, so the check must write as the
// baseline does) for `duration` (whole seconds, at least 1); returns the
// received rate in GB/s (1e9 bytes/s). NOT_FOUND when the binary cannot be
// run (Debian: apt-get install iperf3).
absl::StatusOr<double> MeasureIperf3(const std::string& iperf3_binary,
                                     absl::Duration duration,
                                     size_t write_bytes);

// The receiver's rate (end.sum_received.bits_per_second, in GB/s) from
// iperf3's --json report.
absl::StatusOr<double> ParseIperf3Json(absl::string_view json);

}  // namespace psrt

#endif  // PSRT_TOOLS_PS_BENCH_IPERF3_CHECK_H_

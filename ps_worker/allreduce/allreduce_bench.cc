// The all-reduce ring's speed: --ranks members as threads of this process,
// each with its own Gloo TCP device on loopback (or --host), meeting
// through an in-process RendezvousStore; for each size, the mean time of
// --iterations Sums after a warm-up and the bytes/s it makes. The same
// call ps_worker makes each step (one fused buffer, registered once).
//
//   bazel build //ps_worker/allreduce:allreduce_bench
//   bazel-bin/ps_worker/allreduce/allreduce_bench --ranks=2 \
//       --sizes=412008,4194304 --iterations=200
//
// tools/bench/hybrid_bench.py runs it beside iperf3 on the same link.
#include <cstdio>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "cli/help.h"
#include "gflags/gflags.h"
#include "ps_server/rpc/rendezvous_store.h"
#include "ps_worker/allreduce/allreduce_ring.h"

DEFINE_int32(ranks, 2, "Ring members (threads).");
DEFINE_string(sizes, "412008,4194304",
              "Bytes to all-reduce, comma-separated (multiples of 4).");
DEFINE_int32(iterations, 200, "Timed Sums per size (after 20 warm-up).");
DEFINE_string(host, "127.0.0.1", "Address every member listens on.");

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "all-reduce ring speed: allreduce_bench --ranks=2 --sizes=412008");
  psrt::HandleHelpFlag(argc, argv, "ps_worker/allreduce/");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  std::vector<int64_t> sizes;
  for (absl::string_view s : absl::StrSplit(FLAGS_sizes, ',')) {
    int64_t bytes = 0;
    if (!absl::SimpleAtoi(s, &bytes) || bytes <= 0 || bytes % 4 != 0) {
      std::fprintf(stderr, "--sizes: %s is not a positive multiple of 4\n",
                   std::string(s).c_str());
      return 2;
    }
    sizes.push_back(bytes);
  }
  if (FLAGS_ranks < 2 || FLAGS_iterations < 1) {
    std::fprintf(stderr, "--ranks must be >= 2 and --iterations >= 1\n");
    return 2;
  }
  psrt::RendezvousStore store(FLAGS_ranks);
  std::vector<double> mean_ms(sizes.size());
  std::vector<std::thread> threads;
  std::vector<absl::Status> status(FLAGS_ranks);
  for (int r = 0; r < FLAGS_ranks; ++r) {
    threads.emplace_back([&, r] {
      psrt::AllreduceRing::Options options;
      options.worker = r;
      options.num_workers = FLAGS_ranks;
      options.hostname = FLAGS_host;
      options.rendezvous = [&store](const psrt::RendezvousRequest& request) {
        return store.Serve(request);
      };
      auto ring = psrt::AllreduceRing::Join(options, 0, false);
      if (!ring.ok()) {
        status[r] = ring.status();
        return;
      }
      for (size_t i = 0; i < sizes.size(); ++i) {
        std::vector<float> buffer(sizes[i] / 4, 1.0f);
        absl::Time start;
        for (int it = 0; it < 20 + FLAGS_iterations; ++it) {
          if (it == 20) start = absl::Now();
          status[r] = (*ring)->Sum(buffer.data(), buffer.size());
          if (!status[r].ok()) return;
        }
        if (r == 0) {
          mean_ms[i] = absl::ToDoubleMilliseconds(absl::Now() - start) /
                       FLAGS_iterations;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : status) {
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    // Each member sends and receives 2 (n - 1) / n of the buffer (a ring's
    // reduce-scatter, then its all-gather): the "bus" rate NCCL reports.
    const double bus = 2.0 * (FLAGS_ranks - 1) / FLAGS_ranks;
    std::printf(
        "allreduce ranks=%d bytes=%lld mean_ms=%.3f algo_MBps=%.1f "
        "bus_MBps=%.1f\n",
        FLAGS_ranks, static_cast<long long>(sizes[i]), mean_ms[i],
        sizes[i] / mean_ms[i] / 1e3, bus * sizes[i] / mean_ms[i] / 1e3);
  }
  return 0;
}

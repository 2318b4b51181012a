// The data plane's own speed, before any PS logic: a server process and a
// client moving dense payloads both ways over each libfabric provider,
// against baselines measured in the same run, interleaved by round:
//   - tcp: the raw loopback TCP sender/receiver ps_bench uses
//     (tools/ps_bench/tcp_baseline.h) and iperf3 with 1 MiB writes, which
//     checks that baseline;
//   - shm: memcpy of the same size in one process (a copy into a buffer
//     the reader then loads), and the tcp provider's own figure.
// A push sends the payload and gets an empty reply; a pull sends 9 bytes
// and gets the payload into the caller's buffer.
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "cli/help.h"
#include "dataplane/data_plane_client.h"
#include "dataplane/data_plane_server.h"
#include "dataplane/forked_server.h"
#include "gflags/gflags.h"
#include "tools/ps_bench/iperf3_check.h"
#include "tools/ps_bench/tcp_baseline.h"

DEFINE_string(providers, "tcp,shm",
              "libfabric providers to measure; shm-polled: shm with the "
              "server polling rather than sleeping on its doorbell.");
DEFINE_string(sizes, "4194304,67108864", "Payload bytes per operation.");
DEFINE_double(seconds, 2, "Seconds per measurement.");
DEFINE_int32(rounds, 3, "Interleaved rounds (the median is reported).");
DEFINE_string(iperf3, "iperf3", "iperf3 binary for the TCP baseline's check.");

namespace psrt::dataplane {
namespace {

constexpr char kToken[] = "bench-token";

// What the readers loaded, kept so that no load is optimized away.
volatile uint64_t loaded = 0;

// A push (first byte 'P') is answered with nothing, a pull ('L' + 8-byte
// size) with that many bytes of one buffer.
CallHandler PushPullHandler() {
  auto pull_source = std::make_shared<std::vector<uint8_t>>();
  return [pull_source](
             uint32_t,
             absl::Span<const uint8_t> request) -> absl::StatusOr<Reply> {
    if (request.size() == 9 && request[0] == 'L') {
      uint64_t n;
      std::memcpy(&n, request.data() + 1, 8);
      if (pull_source->size() < n) pull_source->assign(n, 7);
      return Reply{absl::MakeConstSpan(pull_source->data(), n), pull_source};
    }
    return Reply{};
  };
}

// GB/s (1e9 bytes/s) of `op` moving `bytes` per call for about `seconds`.
template <typename Op>
absl::StatusOr<double> Rate(size_t bytes, double seconds, Op op) {
  for (int i = 0; i < 2; ++i) {  // warm-up
    if (absl::Status s = op(); !s.ok()) return s;
  }
  const absl::Time start = absl::Now();
  const absl::Time end = start + absl::Seconds(seconds);
  int64_t ops = 0;
  while (absl::Now() < end) {
    if (absl::Status s = op(); !s.ok()) return s;
    ++ops;
  }
  return static_cast<double>(bytes) * static_cast<double>(ops) /
         absl::ToDoubleSeconds(absl::Now() - start) / 1e9;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int Run() {
  std::vector<size_t> sizes;
  for (absl::string_view s : absl::StrSplit(FLAGS_sizes, ',')) {
    size_t n;
    if (!absl::SimpleAtoi(s, &n) || n == 0) {
      std::fprintf(stderr, "--sizes: '%s' is not a byte count\n",
                   std::string(s).c_str());
      return 2;
    }
    sizes.push_back(n);
  }
  std::vector<std::string> providers =
      absl::StrSplit(FLAGS_providers, ',', absl::SkipEmpty());
  // results[name][size] = one figure per round.
  std::map<std::string, std::map<size_t, std::vector<double>>> results;
  for (int round = 1; round <= FLAGS_rounds; ++round) {
    std::fprintf(stderr, "round %d of %d\n", round, FLAGS_rounds);
    for (const std::string& name : providers) {
      // "shm-polled": shm with a server that polls rather than sleeping
      // on its doorbell (dataplane/doorbell.h), the way it ran before.
      const bool polled = name == "shm-polled";
      const std::string provider = polled ? "shm" : name;
      DataPlaneServerOptions options;
      options.fabric.provider = provider;
      options.fabric.doorbell = !polled;
      options.token = kToken;
      options.handler_threads = 1;
      auto server = ForkedServer::Start(options, PushPullHandler(), 1);
      if (!server.ok()) {
        std::fprintf(stderr, "%s: %s\n", name.c_str(),
                     std::string(server.status().message()).c_str());
        continue;
      }
      FabricOptions fabric;
      fabric.provider = provider;
      auto client = DataPlaneClient::Connect(fabric, (*server)->address(),
                                             (*server)->challenges()[0], kToken,
                                             absl::Now() + absl::Seconds(10));
      if (!client.ok()) {
        std::fprintf(stderr, "%s: %s\n", name.c_str(),
                     std::string(client.status().message()).c_str());
        continue;
      }
      for (size_t n : sizes) {
        std::vector<uint8_t> payload(n, 1), into(n, 0);
        payload[0] = 'P';
        auto push = Rate(n, FLAGS_seconds, [&]() -> absl::Status {
          return (*client)->Call(
              payload,
              [](uint64_t) -> absl::StatusOr<absl::Span<uint8_t>> {
                return absl::Span<uint8_t>();
              },
              absl::Now() + absl::Seconds(30));
        });
        uint8_t ask[9] = {'L'};
        const uint64_t want = n;
        std::memcpy(ask + 1, &want, 8);
        auto pull = Rate(n, FLAGS_seconds, [&]() -> absl::Status {
          absl::Status s = (*client)->Call(
              absl::MakeConstSpan(ask, 9),
              [&](uint64_t bytes) -> absl::StatusOr<absl::Span<uint8_t>> {
                return absl::MakeSpan(into.data(), bytes);
              },
              absl::Now() + absl::Seconds(30));
          loaded += TouchEveryCacheLine(
              reinterpret_cast<const char*>(into.data()), n);
          return s;
        });
        if (!push.ok() || !pull.ok()) {
          std::fprintf(stderr, "%s %zu: %s %s\n", name.c_str(), n,
                       push.status().ToString().c_str(),
                       pull.status().ToString().c_str());
          continue;
        }
        results[name + " push"][n].push_back(*push);
        results[name + " pull"][n].push_back(*pull);
        std::fprintf(stderr, "  %s %zu bytes: push %.3f GB/s, pull %.3f GB/s\n",
                     name.c_str(), n, *push, *pull);
      }
      client->reset();
    }
    for (size_t n : sizes) {
      auto tcp = MeasureTcpBaseline(n, absl::Seconds(FLAGS_seconds));
      if (tcp.ok()) results["raw TCP"][n].push_back(tcp->gbytes_per_s);
      std::vector<uint8_t> from(n, 3), to(n, 0);
      auto copy = Rate(n, FLAGS_seconds, [&]() -> absl::Status {
        std::memcpy(to.data(), from.data(), n);
        loaded +=
            TouchEveryCacheLine(reinterpret_cast<const char*>(to.data()), n);
        from[n / 2] ^= 1;  // a new source each time: no copy is skipped
        return absl::OkStatus();
      });
      if (copy.ok()) results["memcpy"][n].push_back(*copy);
      std::fprintf(stderr,
                   "  baselines %zu bytes: raw TCP %.3f, memcpy %.3f GB/s\n", n,
                   tcp.ok() ? tcp->gbytes_per_s : 0.0, copy.ok() ? *copy : 0.0);
    }
    auto iperf =
        MeasureIperf3(FLAGS_iperf3, absl::Seconds(std::max(1.0, FLAGS_seconds)),
                      size_t{1} << 20);
    if (iperf.ok()) {
      for (size_t n : sizes) results["iperf3"][n].push_back(*iperf);
    } else {
      std::fprintf(stderr, "iperf3: %s\n", iperf.status().ToString().c_str());
    }
  }
  std::printf("%-12s %12s %10s %10s %10s %10s\n", "case", "bytes", "GB/s",
              "x raw TCP", "x iperf3", "x memcpy");
  for (const auto& [name, by_size] : results) {
    for (const auto& [size, figures] : by_size) {
      const size_t n = size;  // (a structured binding cannot be captured)
      const double g = Median(figures);
      auto ratio = [&](const std::string& base) {
        auto it = results.find(base);
        if (it == results.end() || it->second.count(n) == 0) return 0.0;
        const double b = Median(it->second.at(n));
        return b > 0 ? g / b : 0.0;
      };
      std::printf("%-12s %12zu %10.3f %10.2f %10.2f %10.2f\n", name.c_str(), n,
                  g, ratio("raw TCP"), ratio("iperf3"), ratio("memcpy"));
    }
  }
  return 0;
}

}  // namespace
}  // namespace psrt::dataplane

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "The data plane's bandwidth per libfabric provider against raw TCP, "
      "iperf3 and memcpy in the same run.\n"
      "  data_plane_bench [--providers=tcp,shm] [--sizes=4194304,67108864]");
  psrt::HandleHelpFlag(argc, argv, "dataplane/");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  return psrt::dataplane::Run();
}

// psctl: inspects a running psrt cluster.
//
//   psctl status      one line per PS: shards, bytes, requests, errors
//   psctl variables   every variable with its shards: where, rows, bytes
//   psctl balance     parameter bytes per PS and the max/min ratio
#include <algorithm>
#include <iostream>
#include <string>

#include "absl/strings/str_format.h"
#include "cli/help.h"
#include "clients/cpp/client.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "partitioner/cluster_spec.h"
#include "partitioner/variable_spec.h"

DEFINE_string(cluster, "",
              "Cluster spec (TF_CONFIG-style JSON or file); empty: TF_CONFIG, "
              "else one PS on localhost:2223.");
DEFINE_double(timeout_secs, 10, "How long to wait for every PS to answer.");

namespace psrt {
namespace {

std::string Bytes(int64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return absl::StrFormat(u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
}

int Status(Client* client, const ClusterSpec& cluster) {
  auto stats = client->Stats();
  if (!stats.ok()) {
    std::cerr << "psctl: " << stats.status() << "\n";
    return 1;
  }
  std::cout << absl::StrFormat("%-4s %-22s %7s %12s %10s %10s %9s %9s\n", "PS",
                               "address", "shards", "parameters", "pulls",
                               "pushes", "rejected", "uptime");
  for (const StatsResponse& s : *stats) {
    std::cout << absl::StrFormat("%-4d %-22s %7d %12s %10d %10d %9d %8.0fs\n",
                                 s.ps_task(), cluster.ps[s.ps_task()],
                                 s.num_shards(), Bytes(s.parameter_bytes()),
                                 s.pull_requests(), s.push_requests(),
                                 s.rejected_pushes(), s.uptime_seconds());
  }
  return 0;
}

int Variables(Client* client) {
  auto lists = client->ListVariables();
  if (!lists.ok()) {
    std::cerr << "psctl: " << lists.status() << "\n";
    return 1;
  }
  const auto& catalog = (*lists)[0].variables();
  for (int i = 0; i < catalog.size(); ++i) {
    std::cout << "#" << i << " " << DescribeSpec(catalog[i].spec()) << "\n";
    for (const auto& ps : *lists) {
      for (const ShardInfo& shard : ps.variables(i).shards()) {
        std::cout << absl::StrFormat(
            "    shard %-4d PS %-3d rows %-12d %12s  version %d\n",
            shard.shard(), shard.ps_task(), shard.num_rows(),
            Bytes(shard.bytes()), shard.version());
      }
    }
  }
  if (catalog.empty()) std::cout << "no variables\n";
  return 0;
}

int Balance(Client* client) {
  auto stats = client->Stats();
  if (!stats.ok()) {
    std::cerr << "psctl: " << stats.status() << "\n";
    return 1;
  }
  int64_t max = 0, min = INT64_MAX, total = 0;
  for (const StatsResponse& s : *stats) {
    max = std::max(max, s.parameter_bytes());
    min = std::min(min, s.parameter_bytes());
    total += s.parameter_bytes();
  }
  for (const StatsResponse& s : *stats) {
    std::cout << absl::StrFormat(
        "PS %-3d %12s  %5.1f%%\n", s.ps_task(), Bytes(s.parameter_bytes()),
        100.0 * s.parameter_bytes() / std::max<int64_t>(1, total));
  }
  std::cout << absl::StrFormat("total %s, max/min %.3f\n", Bytes(total),
                               min > 0 ? static_cast<double>(max) / min : 0.0);
  return 0;
}

}  // namespace
}  // namespace psrt

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "Inspects a running psrt cluster.\n"
      "  psctl [--cluster=JSON|FILE] status|variables|balance");
  FLAGS_logtostderr = true;
  psrt::HandleHelpFlag(argc, argv, "tools/psctl/");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  if (argc != 2) {
    std::cerr << "usage: psctl [--cluster=...] status|variables|balance\n";
    return 2;
  }
  auto cluster = psrt::LoadClusterSpec(FLAGS_cluster, 2223);
  if (!cluster.ok()) {
    std::cerr << "psctl: " << cluster.status() << "\n";
    return 2;
  }
  psrt::ClientOptions options;
  options.ps_addresses = cluster->ps;
  options.call_timeout = absl::Seconds(FLAGS_timeout_secs);
  options.max_attempts = 2;
  auto client = psrt::Client::Connect(options);
  if (!client.ok()) {
    std::cerr << "psctl: " << client.status() << "\n";
    return 2;
  }
  if (auto s = (*client)->WaitForServers(absl::Seconds(FLAGS_timeout_secs));
      !s.ok()) {
    std::cerr << "psctl: " << s << "\n";
    return 1;
  }
  const std::string command = argv[1];
  if (command == "status") return psrt::Status(client->get(), *cluster);
  if (command == "variables") return psrt::Variables(client->get());
  if (command == "balance") return psrt::Balance(client->get());
  std::cerr << "psctl: unknown command '" << command
            << "' (status, variables, balance)\n";
  return 2;
}

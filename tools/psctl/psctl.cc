// psctl: inspects a running psrt cluster.
//
//   psctl status      one line per PS: shards, bytes, requests, errors
//   psctl variables   every variable with its shards: where, rows, bytes
//                     (--json: the catalog, as psctl size reads it)
//   psctl balance     parameter bytes per PS and the max/min ratio
//   psctl checkpoint  take a checkpoint of every PS now (progress lines
//                     every --progress_secs while it runs)
//   psctl replicas    --replicas: every shard's copies, roles, versions,
//                     lag, whether they agree; works with a PS down
//   psctl checkpoints --checkpoint_uri=URI
//                     every checkpoint: step, bytes, bytes per PS
//   psctl size --variables=FILE --num_ps=N [--replicas=R]
//                     each PS's memory by the sizing rule (no cluster
//                     needed): what to request and limit per container
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "cli/help.h"
#include "cli/security_flags.h"
#include "clients/cpp/client.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "google/protobuf/util/json_util.h"
#include "partitioner/cluster_spec.h"
#include "partitioner/variable_spec.h"
#include "ps_server/checkpoint/checkpoint_catalog.h"
#include "ps_server/checkpoint/transfer_progress.h"
#include "storage/storage.h"
#include "tools/psctl/checkpoint_export.h"
#include "tools/psctl/memory_estimate.h"
#include "tools/psctl/replicas_report.h"

DEFINE_string(cluster, "",
              "Cluster spec (TF_CONFIG-style JSON or file); empty: TF_CONFIG, "
              "else one PS on localhost:2223.");
DEFINE_double(timeout_secs, 10, "How long to wait for every PS to answer.");
DEFINE_string(checkpoint_uri, "",
              "checkpoint: the servers' --checkpoint_uri, to check (empty: "
              "wherever the servers are configured to write; another root "
              "is refused); checkpoints: where to list (required).");
DEFINE_double(checkpoint_timeout_secs, 3600,
              "checkpoint: how long to wait for the save.");
DEFINE_double(progress_secs, 5,
              "checkpoint: print every PS's progress (MB done, MB/s, time "
              "left) this often while the save runs; 0: never.");
DEFINE_string(s3_endpoint, "", "checkpoints: S3-compatible endpoint.");
DEFINE_string(s3_region, "", "checkpoints: region to sign for.");
DEFINE_string(s3_ca_bundle, "",
              "checkpoints: PEM file of the CAs to trust for an https "
              "--s3_endpoint (empty: AWS_CA_BUNDLE, the profile's ca_bundle, "
              "the system's CAs).");
DEFINE_bool(shards, false, "checkpoints: also list every shard file.");
DEFINE_string(checkpoint_name, "",
              "export: which checkpoint under --checkpoint_uri (default: "
              "its latest, or --checkpoint_uri itself if it is one).");
DEFINE_string(out, "",
              "export: local directory for the .npy files and index.json.");
DEFINE_string(variables, "",
              "size: a JSON file holding a CreateVariablesRequest "
              "({\"specs\": [VariableSpec, ...]}, protobuf's JSON mapping), "
              "in catalog order.");
DEFINE_int32(num_ps, 2, "size: the PS count to place the variables on.");
DEFINE_bool(json, false,
            "variables: print the catalog as a CreateVariablesRequest in "
            "JSON instead (what psctl size --variables reads).");
DEFINE_int32(replicas, 1, "size: ps_server --replicas (copies of a shard).");
DEFINE_string(data_plane, "fabric",
              "size: ps_server --data_plane (grpc or fabric: the data plane "
              "adds to each PS's base).");
DEFINE_int64(hash_rows, int64_t{1} << 20,
             "size: rows a hash embedding without a capacity (or "
             "eviction.max_rows) is expected to reach, over all its shards.");

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
  if (u == 0) return absl::StrFormat("%.0f %s", v, units[u]);
  return absl::StrFormat("%.1f %s", v, units[u]);
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
  for (size_t i = 0; i < stats->size(); ++i) {
    const StatsResponse& s = (*stats)[i];
    if (s.ps_task() != static_cast<int>(i)) {
      std::cerr << "psctl: " << cluster.ps[i] << " says it is PS "
                << s.ps_task() << ", but the cluster spec lists it as PS " << i
                << " (different cluster specs?)\n";
    }
    std::cout << absl::StrFormat("%-4d %-22s %7d %12s %10d %10d %9d %8.0fs\n",
                                 static_cast<int>(i), cluster.ps[i],
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
  // Every PS should hold the same catalog; whatever they answer, list
  // what each holds and say where they differ (never index past a list).
  const auto& catalog = (*lists)[0].variables();
  if (FLAGS_json) {
    CreateVariablesRequest request;
    for (const VariableInfo& v : catalog) *request.add_specs() = v.spec();
    std::string json;
    google::protobuf::util::JsonPrintOptions pretty;
    pretty.add_whitespace = true;
    if (auto s =
            google::protobuf::util::MessageToJsonString(request, &json, pretty);
        !s.ok()) {
      std::cerr << "psctl: " << s.ToString() << "\n";
      return 1;
    }
    std::cout << json;
    return 0;
  }
  int drifted = 0;
  for (size_t p = 1; p < lists->size(); ++p) {
    const auto& other = (*lists)[p].variables();
    int first_difference = -1;
    for (int i = 0; i < std::max(catalog.size(), other.size()); ++i) {
      if (i >= catalog.size() || i >= other.size() ||
          !SameSpec(catalog[i].spec(), other[i].spec())) {
        first_difference = i;
        break;
      }
    }
    if (first_difference >= 0) {
      ++drifted;
      std::cout << absl::StrFormat(
          "catalog drift: PS %d holds %d variables, PS 0 holds %d; they "
          "differ from #%d on (creating the variables again from a worker "
          "repairs a PS that is behind)\n",
          static_cast<int>(p), other.size(), catalog.size(), first_difference);
    }
  }
  for (int i = 0; i < catalog.size(); ++i) {
    std::cout << "#" << i << " " << DescribeSpec(catalog[i].spec()) << "\n";
    for (const auto& ps : *lists) {
      if (i >= ps.variables_size() ||
          ps.variables(i).spec().name() != catalog[i].spec().name()) {
        std::cout << absl::StrFormat("    PS %-3d does not hold it\n",
                                     ps.ps_task());
        continue;
      }
      const bool admission = catalog[i].spec().has_admission();
      const bool eviction = catalog[i].spec().has_eviction();
      const bool ssd_tier =
          catalog[i].spec().storage().tier() == StorageSpec::SSD;
      for (const ShardInfo& shard : ps.variables(i).shards()) {
        std::cout << absl::StrFormat(
            "    shard %-4d PS %-3d rows %-12d %12s  version %d%s%s%s%s\n",
            shard.shard(), ps.ps_task(), shard.num_rows(), Bytes(shard.bytes()),
            shard.version(),
            admission ? absl::StrFormat("  admitted %d, unadmitted "
                                        "gradients dropped %d",
                                        shard.admitted_rows(),
                                        shard.unadmitted_gradients())
                      : "",
            eviction || shard.evicted_rows() > 0
                ? absl::StrFormat("  evicted %d", shard.evicted_rows())
                : "",
            ssd_tier ? absl::StrFormat("  on disk %d rows (%s), promoted %d",
                                       shard.spilled_rows(),
                                       Bytes(shard.spilled_bytes()),
                                       shard.promoted_rows())
                     : "",
            shard.backup()
                ? absl::StrFormat("  (backup of PS %d)", shard.ps_task())
                : "");
      }
    }
  }
  if (catalog.empty()) std::cout << "no variables\n";
  return drifted > 0 ? 1 : 0;
}

// psctl size: each PS's memory by the sizing rule (memory_estimate.h).
int SizeCommand() {
  if (FLAGS_variables.empty()) {
    std::cerr << "psctl size: --variables=FILE is required (a JSON "
                 "CreateVariablesRequest: {\"specs\": [...]})\n";
    return 2;
  }
  std::ifstream in(FLAGS_variables);
  if (!in) {
    std::cerr << "psctl size: cannot read --variables=" << FLAGS_variables
              << "\n";
    return 2;
  }
  std::stringstream text;
  text << in.rdbuf();
  CreateVariablesRequest request;
  if (auto s =
          google::protobuf::util::JsonStringToMessage(text.str(), &request);
      !s.ok()) {
    std::cerr << "psctl size: " << FLAGS_variables
              << " is not a CreateVariablesRequest in JSON: " << s.ToString()
              << "\n";
    return 2;
  }
  if (FLAGS_data_plane != "grpc" && FLAGS_data_plane != "fabric") {
    std::cerr << "psctl size: --data_plane=" << FLAGS_data_plane
              << ": expected grpc or fabric\n";
    return 2;
  }
  const bool data_plane = FLAGS_data_plane == "fabric";
  auto estimates = EstimatePsMemory(
      {request.specs().begin(), request.specs().end()}, FLAGS_num_ps,
      FLAGS_hash_rows, FLAGS_replicas, data_plane);
  if (!estimates.ok()) {
    std::cerr << "psctl size: " << estimates.status() << "\n";
    return 2;
  }
  std::cout << absl::StrFormat(
      "%d variables on %d PS, replicas %d (docs/operations.md, Sizing a "
      "PS: %s base + parameters and slots + %d B per hash row, times the "
      "replicas; limit +%.0f%%)\n",
      request.specs_size(), FLAGS_num_ps, FLAGS_replicas,
      Bytes(PsBaseBytes(FLAGS_replicas, data_plane)), kHashRowOverheadBytes,
      100 * kLimitHeadroom);
  std::cout << absl::StrFormat("%-4s %16s %12s %14s %12s %12s\n", "PS",
                               "params+slots", "hash rows", "row overhead",
                               "estimate", "limit");
  int64_t most = 0, most_limit = 0;
  for (size_t t = 0; t < estimates->size(); ++t) {
    const PsMemoryEstimate& e = (*estimates)[t];
    std::cout << absl::StrFormat("%-4d %16s %12d %14s %12s %12s\n", t,
                                 Bytes(e.parameter_bytes), e.hash_rows,
                                 Bytes(e.row_overhead_bytes),
                                 Bytes(e.total_bytes), Bytes(e.limit_bytes));
    most = std::max(most, e.total_bytes);
    most_limit = std::max(most_limit, e.limit_bytes);
  }
  const auto mib = [](int64_t b) { return (b + (1 << 20) - 1) >> 20; };
  std::cout << absl::StrFormat(
      "Kubernetes, every PS pod: resources: {requests: {memory: %dMi}, "
      "limits: {memory: %dMi}}\n",
      mib(most), mib(most_limit));
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

// One line per save or restore running on a PS now: "PS 1: checkpoint:
// PS 1 saving 12.5 of 40.0 MB (31.2%), 8.1 MB/s, about 3 s left".
void PrintTransfers(Client* client) {
  auto stats = client->Stats();
  if (!stats.ok()) return;  // the save's own answer will say what is wrong
  for (const StatsResponse& s : *stats) {
    for (const Transfer& t : s.transfers()) {
      std::cout << "PS " << s.ps_task() << ": " << t.what() << " "
                << DescribeTransfer(
                       {t.what(), t.done_bytes(), t.total_bytes(), t.seconds()})
                << std::endl;
    }
  }
}

int TakeCheckpoint(Client* client) {
  // The save runs on its own thread; this one shows its progress on every
  // PS every --progress_secs.
  absl::StatusOr<CheckpointResponse> r;
  absl::Notification done;
  std::thread save([&] {
    r = client->Checkpoint(FLAGS_checkpoint_uri,
                           absl::Seconds(FLAGS_checkpoint_timeout_secs));
    done.Notify();
  });
  while (FLAGS_progress_secs > 0 && !done.WaitForNotificationWithTimeout(
                                        absl::Seconds(FLAGS_progress_secs))) {
    PrintTransfers(client);
  }
  save.join();
  if (!r.ok()) {
    std::cerr << "psctl: " << r.status() << "\n";
    return 1;
  }
  std::cout << absl::StrFormat(
      "checkpoint %s: step %d, %d files, %s in %.2f s (%.0f MB/s)\n", r->uri(),
      r->global_step(), r->files(), Bytes(r->bytes()), r->seconds(),
      r->bytes() / 1e6 / std::max(r->seconds(), 1e-9));
  return 0;
}

S3Options S3OptionsFromFlags() {
  S3Options s3;
  s3.endpoint = FLAGS_s3_endpoint;
  s3.region = FLAGS_s3_region;
  s3.ca_bundle = FLAGS_s3_ca_bundle;
  return s3;
}

// Every checkpoint under --checkpoint_uri with its step, size, and the
// bytes each PS wrote (the balance report otherwise made from S3 listings).
int ListCheckpointsCommand() {
  if (FLAGS_checkpoint_uri.empty()) {
    std::cerr << "psctl checkpoints: --checkpoint_uri is required\n";
    return 2;
  }
  const S3Options s3 = S3OptionsFromFlags();
  auto root = OpenStorage(FLAGS_checkpoint_uri, s3);
  if (!root.ok()) {
    std::cerr << "psctl: " << root.status() << "\n";
    return 2;
  }
  auto listing = ListCheckpoints(**root);
  if (!listing.ok()) {
    std::cerr << "psctl: " << listing.status() << "\n";
    return 1;
  }
  auto latest = ReadLatest(**root);
  std::cout << absl::StrFormat("%-32s %-10s %12s %10s %7s %6s  %s\n", "name",
                               "state", "step", "bytes", "files", "PS",
                               "bytes per PS (max/min)");
  for (const CheckpointListing& l : *listing) {
    const bool is_latest = latest.ok() && *latest == l.name;
    if (!l.complete) {
      std::cout << absl::StrFormat("%-32s %-10s %12s %10s %7d\n", l.name,
                                   "partial", "-", Bytes(l.bytes), l.objects);
      continue;
    }
    auto m = ReadManifest(**root, l.name);
    if (!m.ok()) {
      std::cout << absl::StrFormat("%-32s %-10s %s\n", l.name, "CORRUPT",
                                   m.status().ToString());
      continue;
    }
    std::vector<int64_t> per_ps(m->num_ps(), 0);
    for (const CheckpointFile& f : m->files()) {
      if (f.ps_task() >= 0 && f.ps_task() < m->num_ps()) {
        per_ps[f.ps_task()] += f.bytes();
      }
    }
    std::string ps_bytes;
    for (size_t i = 0; i < per_ps.size(); ++i) {
      absl::StrAppend(&ps_bytes, i ? ", " : "", Bytes(per_ps[i]));
    }
    const auto [lo, hi] = std::minmax_element(per_ps.begin(), per_ps.end());
    std::cout << absl::StrFormat(
        "%-32s %-10s %12d %10s %7d %6d  %s (%.2f)\n", l.name,
        is_latest ? "latest" : "complete", m->global_step(),
        Bytes(m->total_bytes()), m->files_size(), m->num_ps(), ps_bytes,
        *lo > 0 ? static_cast<double>(*hi) / *lo : 0.0);
    if (FLAGS_shards) {
      for (const CheckpointFile& f : m->files()) {
        std::cout << absl::StrFormat("    %-48s PS %-3d %10s %10d rows\n",
                                     f.path(), f.ps_task(), Bytes(f.bytes()),
                                     f.num_rows());
      }
    }
  }
  return 0;
}

// The checkpoint as numpy files (checkpoint_export.h).
int ExportCommand() {
  if (FLAGS_checkpoint_uri.empty() || FLAGS_out.empty()) {
    std::cerr << "psctl export: --checkpoint_uri and --out are required\n";
    return 2;
  }
  const S3Options s3 = S3OptionsFromFlags();
  auto root = OpenStorage(FLAGS_checkpoint_uri, s3);
  if (!root.ok()) {
    std::cerr << "psctl: " << root.status() << "\n";
    return 2;
  }
  std::string name = FLAGS_checkpoint_name;
  if (name.empty()) {
    auto latest = ReadLatest(**root);
    if (latest.ok()) {
      name = *latest;
    } else if (!absl::IsNotFound(latest.status())) {
      std::cerr << "psctl: " << latest.status() << "\n";
      return 1;
    }
  } else if (absl::Status s = CheckCheckpointName(name); !s.ok()) {
    std::cerr << "psctl: --checkpoint_name: " << s << "\n";
    return 2;
  }
  // No `latest`: --checkpoint_uri names one checkpoint.
  auto checkpoint = name.empty()
                        ? std::move(root)
                        : OpenStorage(JoinUri(FLAGS_checkpoint_uri, name), s3);
  if (!checkpoint.ok()) {
    std::cerr << "psctl: " << checkpoint.status() << "\n";
    return 2;
  }
  auto manifest = ReadManifest(**checkpoint, "");
  if (!manifest.ok()) {
    std::cerr << "psctl: " << manifest.status() << "\n";
    return 1;
  }
  auto summary = ExportCheckpoint(**checkpoint, *manifest, FLAGS_out);
  if (!summary.ok()) {
    std::cerr << "psctl: export of " << manifest->name()
              << " failed: " << summary.status() << "\n";
    return 1;
  }
  std::cout << "exported " << manifest->name() << " (global step "
            << manifest->global_step() << "): " << summary->variables
            << " variables, " << summary->rows << " rows, "
            << Bytes(summary->bytes) << " to " << FLAGS_out
            << " (index.json)\n";
  return 0;
}

}  // namespace
}  // namespace psrt

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "Inspects a running psrt cluster.\n"
      "  psctl [--cluster=JSON|FILE] "
      "status|variables|balance|replicas|checkpoint\n"
      "  psctl --checkpoint_uri=URI checkpoints\n"
      "  psctl --checkpoint_uri=URI [--checkpoint_name=NAME] --out=DIR export\n"
      "  psctl --variables=FILE [--num_ps=N] [--replicas=R] [--hash_rows=N] "
      "size");
  FLAGS_logtostderr = true;
  psrt::HandleHelpFlag(argc, argv, "tools/psctl/");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  if (argc != 2) {
    std::cerr << "usage: psctl [--cluster=...] "
                 "status|variables|balance|replicas|checkpoint|checkpoints|"
                 "export|size\n";
    return 2;
  }
  if (std::string(argv[1]) == "checkpoints") {
    return psrt::ListCheckpointsCommand();
  }
  if (std::string(argv[1]) == "export") return psrt::ExportCommand();
  if (std::string(argv[1]) == "size") return psrt::SizeCommand();
  auto cluster = psrt::LoadClusterSpec(FLAGS_cluster, 2223);
  if (!cluster.ok()) {
    std::cerr << "psctl: " << cluster.status() << "\n";
    return 2;
  }
  psrt::ClientOptions options;
  options.ps_addresses = cluster->ps;
  auto security = psrt::SecurityOptionsFromFlags();
  if (!security.ok()) {
    std::cerr << "psctl: " << security.status() << "\n";
    return 2;
  }
  options.security = *security;
  options.call_timeout = absl::Seconds(FLAGS_timeout_secs);
  options.max_attempts = 2;
  auto client = psrt::Client::Connect(options);
  if (!client.ok()) {
    std::cerr << "psctl: " << client.status() << "\n";
    return 2;
  }
  // Asks each PS on its own: a dead one is reported, not waited for.
  if (std::string(argv[1]) == "replicas") {
    return psrt::ReplicasReport(options, std::cout);
  }
  if (auto s = (*client)->WaitForServers(absl::Seconds(FLAGS_timeout_secs));
      !s.ok()) {
    std::cerr << "psctl: " << s << "\n";
    if (FLAGS_cluster.empty() && std::getenv("TF_CONFIG") == nullptr) {
      std::cerr << "psctl: no --cluster and no TF_CONFIG, so psctl looked for "
                   "one PS on localhost:2223; name the cluster with "
                   "--cluster='{\"cluster\": {\"ps\": [\"host:port\", ...]}}' "
                   "(or a file) or set TF_CONFIG\n";
    }
    return 1;
  }
  const std::string command = argv[1];
  if (command == "status") return psrt::Status(client->get(), *cluster);
  if (command == "variables") return psrt::Variables(client->get());
  if (command == "balance") return psrt::Balance(client->get());
  if (command == "checkpoint") return psrt::TakeCheckpoint(client->get());
  std::cerr << "psctl: unknown command '" << command
            << "' (status, variables, balance, replicas, checkpoint, "
               "checkpoints, export, size)\n";
  return 2;
}

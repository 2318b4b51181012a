// ckpt_bench: checkpoint throughput of a running cluster, and what a
// checkpoint does to push latency.
//
//   ckpt_bench --cluster=... --table_rows=16777216 --checkpoints=2
//
// Creates an Adagrad embedding table (table_rows x dim; parameters plus
// accumulators = table_rows * dim * 8 bytes, 1 GiB by default), then pushes
// `push_ids` random rows every --push_interval_ms from one client thread
// throughout:
// first for --baseline_secs with no checkpoint, then while PS 0 takes
// --checkpoints checkpoints one after another. Prints, and with --json as
// one JSON line: checkpoint bytes, seconds and MB/s each, and push latency
// p50/p99 without and during checkpoints.
#include <algorithm>
#include <atomic>
#include <iostream>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "cli/help.h"
#include "cli/security_flags.h"
#include "clients/cpp/client.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "partitioner/cluster_spec.h"

DEFINE_string(cluster, "",
              "Cluster spec (TF_CONFIG-style JSON or file); empty: TF_CONFIG, "
              "else one PS on localhost:2223.");
DEFINE_int64(table_rows, 16 << 20, "Rows of the embedding table.");
DEFINE_int32(dim, 8, "Floats per row.");
DEFINE_int32(shards, 8, "Shards of the table.");
DEFINE_int32(push_ids, 4096, "Rows per push.");
DEFINE_double(baseline_secs, 5, "Seconds of pushes without a checkpoint.");
DEFINE_double(push_interval_ms, 2,
              "Time from one push's start to the next (a worker's step "
              "time); 0: back to back, saturating the server.");
DEFINE_int32(checkpoints, 2, "Checkpoints taken while pushing.");
DEFINE_string(checkpoint_uri, "",
              "The servers' --checkpoint_uri (empty: wherever they are "
              "configured to write; the servers refuse any other root).");
DEFINE_bool(json, false, "Also print the results as one JSON line.");

namespace psrt {
namespace {

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

int Run() {
  auto cluster = LoadClusterSpec(FLAGS_cluster, 2223);
  if (!cluster.ok()) {
    std::cerr << "ckpt_bench: " << cluster.status() << "\n";
    return 2;
  }
  ClientOptions options;
  options.ps_addresses = cluster->ps;
  auto security = SecurityOptionsFromFlags();
  if (!security.ok()) {
    std::cerr << "ckpt_bench: " << security.status() << "\n";
    return 2;
  }
  options.security = *security;
  auto client = Client::Connect(options);
  if (!client.ok() || !(*client)->WaitForServers(absl::Seconds(30)).ok()) {
    std::cerr << "ckpt_bench: cannot reach the cluster\n";
    return 1;
  }
  VariableSpec table;
  table.set_name("ckpt_bench/table");
  table.set_kind(EMBEDDING);
  table.add_shape(FLAGS_table_rows);
  table.add_shape(FLAGS_dim);
  table.mutable_partition()->set_num_shards(FLAGS_shards);
  table.mutable_partition()->set_placement(PartitionSpec::GREEDY_BYTES);
  table.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
  table.mutable_optimizer()->set_learning_rate(0.01f);
  table.mutable_initializer()->set_kind(InitializerSpec::UNIFORM);
  table.mutable_initializer()->set_min(-0.05f);
  table.mutable_initializer()->set_max(0.05f);
  std::cout << "ckpt_bench: creating " << FLAGS_table_rows << " x " << FLAGS_dim
            << " Adagrad table on " << cluster->num_ps() << " PS" << std::endl;
  if (absl::Status s = (*client)->CreateVariables({table}); !s.ok()) {
    std::cerr << "ckpt_bench: " << s << "\n";
    return 1;
  }

  // Pushes until told to stop, recording each push's latency in the
  // current bucket (0: no checkpoint running, 1: during a checkpoint).
  std::atomic<bool> stop{false};
  std::atomic<int> phase{0};
  absl::Mutex mu;
  std::vector<double> latency_ms[2];
  absl::Status push_error;
  std::thread pusher([&] {
    std::mt19937_64 rng(7);
    std::vector<int64_t> ids(FLAGS_push_ids);
    std::vector<float> grads(ids.size() * FLAGS_dim, 0.01f);
    int64_t step = 0;
    while (!stop.load()) {
      for (auto& id : ids) id = rng() % FLAGS_table_rows;
      const int p = phase.load();
      const absl::Time t = absl::Now();
      StepOptions so;
      so.step = step++;
      absl::Status s = (*client)->Push(
          {PushOp::Rows("ckpt_bench/table", ids, grads.data())}, so);
      const double ms = absl::ToDoubleMilliseconds(absl::Now() - t);
      absl::MutexLock lock(&mu);
      if (!s.ok()) {
        push_error = s;
        return;
      }
      if (p < 2 && p == phase.load()) latency_ms[p].push_back(ms);
      const double rest = FLAGS_push_interval_ms - ms;
      if (rest > 0) absl::SleepFor(absl::Milliseconds(rest));
    }
  });

  absl::SleepFor(absl::Seconds(FLAGS_baseline_secs));
  std::cout << "ckpt_bench: baseline pushes done" << std::endl;
  std::vector<CheckpointResponse> saves;
  phase = 1;
  for (int i = 0; i < FLAGS_checkpoints; ++i) {
    auto r = (*client)->Checkpoint(FLAGS_checkpoint_uri);
    if (!r.ok()) {
      stop = true;
      pusher.join();
      std::cerr << "ckpt_bench: checkpoint failed: " << r.status() << "\n";
      return 1;
    }
    std::cout << absl::StrFormat(
                     "ckpt_bench: checkpoint %d: %s, %.1f MB in %.2f s = "
                     "%.0f MB/s",
                     i + 1, r->uri(), r->bytes() / 1e6, r->seconds(),
                     r->bytes() / 1e6 / r->seconds())
              << std::endl;
    saves.push_back(*r);
  }
  phase = 2;  // neither bucket
  stop = true;
  pusher.join();
  if (!push_error.ok()) {
    std::cerr << "ckpt_bench: push failed: " << push_error << "\n";
    return 1;
  }
  absl::MutexLock lock(&mu);
  const double p50[2] = {Percentile(latency_ms[0], 0.5),
                         Percentile(latency_ms[1], 0.5)};
  const double p99[2] = {Percentile(latency_ms[0], 0.99),
                         Percentile(latency_ms[1], 0.99)};
  std::cout << absl::StrFormat(
      "ckpt_bench: push latency without checkpoint: p50 %.2f ms p99 %.2f ms "
      "(%d pushes); during checkpoints: p50 %.2f ms p99 %.2f ms (%d pushes); "
      "p99 ratio %.2f\n",
      p50[0], p99[0], latency_ms[0].size(), p50[1], p99[1],
      latency_ms[1].size(), p99[1] / std::max(p99[0], 1e-9));
  if (FLAGS_json) {
    std::string saves_json;
    for (const CheckpointResponse& r : saves) {
      absl::StrAppendFormat(&saves_json, "%s{\"bytes\": %d, \"seconds\": %.4f}",
                            saves_json.empty() ? "" : ", ", r.bytes(),
                            r.seconds());
    }
    std::cout << absl::StrFormat(
        "{\"checkpoints\": [%s], \"push_p50_ms\": [%.3f, %.3f], "
        "\"push_p99_ms\": [%.3f, %.3f], \"pushes\": [%d, %d]}\n",
        saves_json, p50[0], p50[1], p99[0], p99[1], latency_ms[0].size(),
        latency_ms[1].size());
  }
  return 0;
}

}  // namespace
}  // namespace psrt

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "Measures checkpoint throughput and push latency during checkpoints.\n"
      "  ckpt_bench [--cluster=JSON|FILE] [--table_rows=N] [--checkpoints=N]");
  FLAGS_logtostderr = true;
  psrt::HandleHelpFlag(argc, argv, "tools/ckpt_bench/");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  return psrt::Run();
}

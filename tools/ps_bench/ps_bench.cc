// ps_bench: drives a running psrt cluster and reports throughput, with a raw
// loopback TCP stream moving the same bytes per operation as the baseline.
//
//   ps_bench --cluster='{"cluster": {"ps": ["localhost:2223"]}}'
//   ps_bench --cases=dense_4MiB --seconds=10 --json
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "cli/data_plane_flags.h"
#include "cli/help.h"
#include "cli/security_flags.h"
#include "clients/cpp/client.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "partitioner/cluster_spec.h"
#include "proto/buffer_pool.h"
#include "tools/ctr_datagen/zipf_sampler.h"
#include "tools/ps_bench/iperf3_check.h"
#include "tools/ps_bench/tcp_baseline.h"
#include "util/wire_dtype.h"

DEFINE_string(cluster, "",
              "Cluster spec (TF_CONFIG-style JSON or file); empty: TF_CONFIG, "
              "else one PS on localhost:2223.");
DEFINE_string(
    cases, "dense_4MiB,dense_64MiB,embedding_100k",
    "Comma-separated cases: dense_4MiB, dense_64MiB, embedding_100k; "
    "hash_zipf and hash_zipf_ssd (a hash embedding of --vocab rows, each "
    "operation a pull and a push of 4,096 Zipf(1.05) draws' distinct ids; "
    "_ssd keeps a quarter in memory and the rest in the PS's SSD tier).");
DEFINE_string(ops, "push,pull", "Operations to measure: push, pull or both.");
DEFINE_double(seconds, 2, "Seconds per measurement.");
DEFINE_int32(repeat, 3,
             "Measurements per case and operation, each paired with its own "
             "TCP baseline measurement; medians are reported (the machine "
             "may be shared and noisy).");
DEFINE_bool(json, false, "Also print one JSON object per line per result.");
DEFINE_bool(tcp_baseline, true,
            "Measure the raw loopback TCP baseline for each case.");
DEFINE_string(iperf3, "iperf3",
              "iperf3 binary run beside each TCP baseline measurement, as an "
              "independent check that the baseline is as fast as loopback "
              "TCP (empty: skip).");
DEFINE_int64(message_bytes, 1 << 20, "Client message size (chunking).");
DEFINE_int32(channels_per_ps, 2, "TCP connections per PS.");
DEFINE_string(wire_dtype, "fp32",
              "fp32, bf16 or fp16: how values and gradients travel (bytes "
              "and GB/s count what crosses the wire).");
DEFINE_int64(vocab, 1000000, "Rows of the embedding table.");
DEFINE_int32(embedding_dim, 16, "Floats per embedding row.");
DEFINE_int32(embedding_ids, 100000, "Unique ids per embedding operation.");
DEFINE_int32(inflight, 1,
             "Operations kept in flight (client threads sharing one Client), "
             "as a worker that pushes step k while computing step k+1.");
DEFINE_bool(ids_unique, false,
            "Tell the client the ids are unique (skips its de-duplication, as "
            "a worker that already computed unique ids would).");

namespace psrt {
namespace {

struct Result {
  std::string name;
  std::string op;
  double bytes_per_op = 0;  // bytes that cross the wire
  double ops_per_s = 0;
  double rows_per_op = 0;
  double p50_ms = 0;  // latency of one operation
  double p99_ms = 0;
};

// One measurement: throughput and the latency percentiles of its ops.
struct Rate {
  double ops_per_s = 0;
  double p50_ms = 0;
  double p99_ms = 0;
};

bool Wanted(absl::string_view op) {
  for (absl::string_view o : absl::StrSplit(FLAGS_ops, ',')) {
    if (o == op) return true;
  }
  return false;
}

// Runs op(thread) repeatedly on --inflight threads for --seconds (after a
// warm-up) and returns the total ops/s and the ops' latency percentiles.
template <typename Op>
absl::StatusOr<Rate> Measure(Op&& op) {
  const int threads = std::max(1, FLAGS_inflight);
  for (int t = 0; t < threads; ++t) {
    if (absl::Status s = op(t); !s.ok()) return s;
  }
  const absl::Duration duration = absl::Seconds(FLAGS_seconds);
  std::atomic<int64_t> ops{0};
  absl::Mutex mu;
  absl::Status first_error;
  std::vector<double> latencies_ms;  // guarded by mu
  const absl::Time start = absl::Now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      int64_t mine = 0;
      std::vector<double> mine_ms;
      while (absl::Now() - start < duration || mine < 3) {
        const absl::Time op_start = absl::Now();
        if (absl::Status s = op(t); !s.ok()) {
          absl::MutexLock lock(&mu);
          first_error.Update(s);
          return;
        }
        mine_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - op_start));
        ++mine;
        ++ops;
      }
      absl::MutexLock lock(&mu);
      latencies_ms.insert(latencies_ms.end(), mine_ms.begin(), mine_ms.end());
    });
  }
  for (auto& t : pool) t.join();
  absl::MutexLock lock(&mu);
  if (!first_error.ok()) return first_error;
  Rate rate;
  rate.ops_per_s = ops.load() / absl::ToDoubleSeconds(absl::Now() - start);
  std::sort(latencies_ms.begin(), latencies_ms.end());
  auto at = [&](double q) {
    return latencies_ms[std::min(latencies_ms.size() - 1,
                                 static_cast<size_t>(q * latencies_ms.size()))];
  };
  rate.p50_ms = at(0.5);
  rate.p99_ms = at(0.99);
  return rate;
}

// What each case is compared with, medians of the paired measurements.
struct Baselines {
  double tcp_gbytes_per_s = 0;     // tcp_baseline.h
  double iperf3_gbytes_per_s = 0;  // 0: not measured
};

void Report(const Result& r, const Baselines& b, double ratio) {
  const double gbps = r.ops_per_s * r.bytes_per_op / 1e9;
  std::string line = absl::StrFormat(
      "%-16s %-5s %9.1f ops/s %7.3f GB/s  p50 %.2f ms p99 %.2f ms", r.name,
      r.op, r.ops_per_s, gbps, r.p50_ms, r.p99_ms);
  if (r.rows_per_op > 0) {
    absl::StrAppendFormat(&line, " %7.2fM rows/s",
                          r.ops_per_s * r.rows_per_op / 1e6);
  }
  const double baseline_to_iperf3 =
      b.iperf3_gbytes_per_s > 0 ? b.tcp_gbytes_per_s / b.iperf3_gbytes_per_s
                                : 0;
  if (b.tcp_gbytes_per_s > 0) {
    absl::StrAppendFormat(&line, "  %.2fx raw TCP (%.3f GB/s", ratio,
                          b.tcp_gbytes_per_s);
    if (b.iperf3_gbytes_per_s > 0) {
      absl::StrAppendFormat(&line, "; iperf3 %.3f GB/s, baseline %.2fx of it",
                            b.iperf3_gbytes_per_s, baseline_to_iperf3);
    }
    line += ")";
  }
  std::cout << line << std::endl;
  if (baseline_to_iperf3 > 0 && baseline_to_iperf3 < 0.9) {
    std::cout << "  WARNING: the TCP baseline ran at "
              << absl::StrFormat("%.2f", baseline_to_iperf3)
              << "x of iperf3 in this run: ratios against it overstate psrt"
              << std::endl;
  }
  if (FLAGS_json) {
    std::cout
        << absl::StrFormat(
               "{\"case\": \"%s\", \"op\": \"%s\", \"bytes_per_op\": %.0f, "
               "\"ops_per_s\": %.3f, \"gbytes_per_s\": %.4f, "
               "\"rows_per_s\": %.0f, \"ratio_to_tcp\": %.3f, "
               "\"tcp_gbytes_per_s\": %.4f, \"iperf3_gbytes_per_s\": %.4f, "
               "\"inflight\": %d, \"p50_ms\": %.3f, \"p99_ms\": %.3f}",
               r.name, r.op, r.bytes_per_op, r.ops_per_s, gbps,
               r.ops_per_s * r.rows_per_op, ratio, b.tcp_gbytes_per_s,
               b.iperf3_gbytes_per_s, FLAGS_inflight, r.p50_ms, r.p99_ms)
        << std::endl;
  }
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Measures `op` --repeat times, each right after a TCP baseline of the same
// bytes per operation (and iperf3 beside it), and reports the medians.
template <typename Op>
absl::Status MeasureAndReport(Result r, Op&& op) {
  std::vector<double> ops, tcps, iperfs, ratios, p50s, p99s;
  for (int i = 0; i < std::max(1, FLAGS_repeat); ++i) {
    double tcp = 0;
    if (FLAGS_tcp_baseline) {
      auto baseline = MeasureTcpBaseline(static_cast<size_t>(r.bytes_per_op),
                                         absl::Seconds(FLAGS_seconds));
      if (!baseline.ok()) return baseline.status();
      tcp = baseline->gbytes_per_s;
      if (!FLAGS_iperf3.empty()) {
        auto iperf3 =
            MeasureIperf3(FLAGS_iperf3, absl::Seconds(FLAGS_seconds),
                          std::min(static_cast<size_t>(r.bytes_per_op),
                                   kTcpBaselineWriteBytes));
        if (!iperf3.ok()) {
          LOG(WARNING) << "no iperf3 check of this TCP baseline: "
                       << iperf3.status();
          // Not installed: say so once, not for every case.
          if (absl::IsNotFound(iperf3.status())) FLAGS_iperf3.clear();
        } else {
          iperfs.push_back(*iperf3);
        }
      }
    }
    auto rate = Measure(op);
    if (!rate.ok()) return rate.status();
    ops.push_back(rate->ops_per_s);
    p50s.push_back(rate->p50_ms);
    p99s.push_back(rate->p99_ms);
    tcps.push_back(tcp);
    if (tcp > 0) {
      ratios.push_back(rate->ops_per_s * r.bytes_per_op / 1e9 / tcp);
    }
  }
  r.ops_per_s = Median(ops);
  r.p50_ms = Median(p50s);
  r.p99_ms = Median(p99s);
  Report(r, {Median(tcps), Median(iperfs)}, Median(ratios));
  return absl::OkStatus();
}

absl::Status RunDense(Client* client, const std::string& name, int64_t floats) {
  VariableSpec spec;
  spec.set_name("ps_bench/" + name);
  spec.set_kind(DENSE);
  spec.add_shape(floats);
  spec.mutable_partition()->set_num_shards(client->num_ps());
  spec.mutable_optimizer()->set_learning_rate(1e-6f);
  if (absl::Status s = client->CreateVariables({spec}); !s.ok()) return s;
  std::vector<float> grad(floats, 0.001f);
  std::vector<std::vector<float>> values(std::max(1, FLAGS_inflight),
                                         std::vector<float>(floats));
  const double bytes = floats * WireValueBytes(client->options().wire_dtype);
  if (Wanted("push")) {
    absl::Status s = MeasureAndReport({name, "push", bytes}, [&](int) {
      return client->PushDense(spec.name(), grad.data());
    });
    if (!s.ok()) return s;
  }
  if (Wanted("pull")) {
    absl::Status s = MeasureAndReport({name, "pull", bytes}, [&](int t) {
      return client->PullDense(spec.name(), values[t].data());
    });
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status RunEmbedding(Client* client, const std::string& name) {
  const int64_t dim = FLAGS_embedding_dim, n = FLAGS_embedding_ids;
  VariableSpec spec;
  spec.set_name(absl::StrCat("ps_bench/embedding_", FLAGS_vocab, "x", dim));
  spec.set_kind(EMBEDDING);
  spec.add_shape(FLAGS_vocab);
  spec.add_shape(dim);
  spec.mutable_partition()->set_num_shards(client->num_ps());
  spec.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
  spec.mutable_optimizer()->set_learning_rate(0.01f);
  if (absl::Status s = client->CreateVariables({spec}); !s.ok()) return s;
  if (n > FLAGS_vocab)
    return absl::InvalidArgumentError("--embedding_ids > --vocab");
  // A few batches of unique random ids, cycled.
  std::mt19937_64 rng(1);
  std::vector<int64_t> all(FLAGS_vocab);
  std::iota(all.begin(), all.end(), 0);
  std::vector<std::vector<int64_t>> batches(4);
  for (auto& batch : batches) {
    std::shuffle(all.begin(), all.end(), rng);
    batch.assign(all.begin(), all.begin() + n);
  }
  std::vector<float> grads(n * dim, 0.01f);
  std::vector<std::vector<float>> rows(std::max(1, FLAGS_inflight),
                                       std::vector<float>(n * dim));
  std::atomic<size_t> next{0};
  // Bytes on the wire either way: ids plus rows.
  const double bytes =
      n * (8.0 + WireValueBytes(client->options().wire_dtype) * dim);
  if (Wanted("push")) {
    absl::Status s = MeasureAndReport(
        {name, "push", bytes, 0, static_cast<double>(n)}, [&](int) {
          PushOp op =
              PushOp::Rows(spec.name(), batches[next++ % 4], grads.data());
          op.ids_unique = FLAGS_ids_unique;
          return client->Push({op});
        });
    if (!s.ok()) return s;
  }
  if (Wanted("pull")) {
    absl::Status s = MeasureAndReport(
        {name, "pull", bytes, 0, static_cast<double>(n)}, [&](int t) {
          PullOp op =
              PullOp::Rows(spec.name(), batches[next++ % 4], rows[t].data());
          op.ids_unique = FLAGS_ids_unique;
          return client->Pull({op});
        });
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// A hash embedding of --vocab rows trained on Zipf(1.05) ids: each
// operation pulls, then pushes (Adagrad), the distinct ids of 4,096 fresh
// draws (a CTR batch's ids, hot and cold). With `ssd_tier`, eviction
// max_rows holds a quarter of the table in memory and the PS's SSD tier
// the rest; without, all of it is in memory. The table is filled first
// (every id pushed once) and warmed with 200 operations.
absl::Status RunHashZipf(Client* client, const std::string& name,
                         bool ssd_tier) {
  const int64_t dim = FLAGS_embedding_dim;
  VariableSpec spec;
  spec.set_name(absl::StrCat("ps_bench/", name, "_", FLAGS_vocab, "x", dim));
  spec.set_kind(HASH_EMBEDDING);
  spec.add_shape(FLAGS_vocab);
  spec.add_shape(dim);
  spec.mutable_partition()->set_num_shards(client->num_ps());
  spec.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
  spec.mutable_optimizer()->set_learning_rate(0.01f);
  if (ssd_tier) {
    spec.mutable_eviction()->set_max_rows(FLAGS_vocab / 4);
    spec.mutable_storage()->set_tier(StorageSpec::SSD);
  }
  if (absl::Status s = client->CreateVariables({spec}); !s.ok()) return s;
  // Ranks to ids as a CTR hash spreads them.
  std::mt19937_64 rng(7);
  std::vector<int64_t> ids_by_rank(FLAGS_vocab);
  for (int64_t& id : ids_by_rank) id = static_cast<int64_t>(rng() >> 1);
  std::vector<float> grads(4096 * dim, 0.01f);
  const int64_t piece = std::max<int64_t>(1, FLAGS_vocab / 8);
  for (int64_t first = 0; first < FLAGS_vocab; first += piece) {
    const int64_t n = std::min(piece, FLAGS_vocab - first);
    std::vector<float> fill(n * dim, 0.0f);
    if (absl::Status s = client->Push({PushOp::Rows(
            spec.name(), absl::MakeConstSpan(ids_by_rank).subspan(first, n),
            fill.data())});
        !s.ok()) {
      return s;
    }
  }
  // Fresh draws for every operation, drawn before the clock starts: a pool
  // larger than any measurement uses, cycled.
  const ZipfSampler zipf(FLAGS_vocab, 1.05);
  std::vector<std::vector<int64_t>> batches(4000);
  double distinct = 0;
  for (auto& batch : batches) {
    for (int i = 0; i < 4096; ++i) {
      batch.push_back(ids_by_rank[zipf.Sample(rng) - 1]);
    }
    std::sort(batch.begin(), batch.end());
    batch.erase(std::unique(batch.begin(), batch.end()), batch.end());
    distinct += batch.size();
  }
  distinct /= batches.size();
  std::vector<std::vector<float>> rows(std::max(1, FLAGS_inflight),
                                       std::vector<float>(4096 * dim));
  std::atomic<size_t> next{0};
  auto pull_and_push = [&](int t) {
    const std::vector<int64_t>& ids = batches[next++ % batches.size()];
    PullOp pull = PullOp::Rows(spec.name(), ids, rows[t].data());
    pull.ids_unique = true;
    if (absl::Status s = client->Pull({pull}); !s.ok()) return s;
    PushOp push = PushOp::Rows(spec.name(), ids, grads.data());
    push.ids_unique = true;
    return client->Push({push});
  };
  for (int i = 0; i < 200; ++i) {
    if (absl::Status s = pull_and_push(0); !s.ok()) return s;
  }
  const double bytes =
      2 * distinct * (8.0 + WireValueBytes(client->options().wire_dtype) * dim);
  return MeasureAndReport({name, "pull+push", bytes, 0, distinct},
                          pull_and_push);
}

int Run() {
  auto cluster = LoadClusterSpec(FLAGS_cluster, 2223);
  if (!cluster.ok()) {
    LOG(ERROR) << cluster.status();
    return 2;
  }
  ClientOptions options;
  options.ps_addresses = cluster->ps;
  auto security = SecurityOptionsFromFlags();
  if (!security.ok()) {
    LOG(ERROR) << security.status();
    return 2;
  }
  options.security = *security;
  options.message_bytes = FLAGS_message_bytes;
  options.channels_per_ps = FLAGS_channels_per_ps;
  auto data_plane = DataPlaneFromFlags();
  if (!data_plane.ok()) {
    LOG(ERROR) << data_plane.status();
    return 2;
  }
  options.data_plane = data_plane->data_plane;
  options.data_plane_providers = data_plane->providers;
  auto wire_dtype = ParseWireDtypeFlag(FLAGS_wire_dtype);
  if (!wire_dtype.ok()) {
    LOG(ERROR) << wire_dtype.status();
    return 2;
  }
  options.wire_dtype = *wire_dtype;
  auto client = Client::Connect(options);
  if (!client.ok()) {
    LOG(ERROR) << client.status();
    return 2;
  }
  if (absl::Status s = (*client)->WaitForServers(absl::Seconds(30)); !s.ok()) {
    LOG(ERROR) << s;
    return 1;
  }
  std::cout << "ps_bench: " << cluster->num_ps() << " PS, " << FLAGS_inflight
            << " op(s) in flight, median of " << FLAGS_repeat << " x "
            << FLAGS_seconds << " s, messages of " << FLAGS_message_bytes
            << " bytes, " << FLAGS_channels_per_ps << " channels per PS"
            << std::endl;
  for (const std::string& name :
       std::vector<std::string>(absl::StrSplit(FLAGS_cases, ','))) {
    absl::Status s;
    if (name == "dense_4MiB") {
      s = RunDense(client->get(), name, 1 << 20);
    } else if (name == "dense_64MiB") {
      s = RunDense(client->get(), name, 16 << 20);
    } else if (name == "embedding_100k") {
      s = RunEmbedding(client->get(), name);
    } else if (name == "hash_zipf" || name == "hash_zipf_ssd") {
      s = RunHashZipf(client->get(), name, name == "hash_zipf_ssd");
    } else {
      s = absl::InvalidArgumentError(absl::StrCat("unknown case '", name, "'"));
    }
    if (!s.ok()) {
      LOG(ERROR) << name << ": " << s;
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace psrt

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "Load generator for a running psrt cluster: dense and embedding push/"
      "pull throughput against a raw loopback TCP baseline.\n"
      "  ps_bench [--cluster=JSON|FILE] [--cases=...] [--json]");
  FLAGS_logtostderr = true;
  psrt::HandleHelpFlag(argc, argv, "tools/ps_bench/");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  psrt::TuneAllocatorForLargeMessages();
  return psrt::Run();
}

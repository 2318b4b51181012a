// reader_bench: how fast a worker's input pipeline turns files into batches,
// per format and per parsing thread count (ps_worker --reader_threads).
//
//   reader_bench --format=libsvm --train_files='data/train-*' --threads=1,2
//
// Each round reads the files once per thread count (interleaved, so a noisy
// machine affects every count alike), through ps_worker's Dataset exactly as
// training does (no shuffling, batches of --batch_size), and prints
// examples/s, MB/s of input read, and MB/s per parsing thread; the medians of
// --rounds follow, with each count's speed-up over the first.
#include <sys/stat.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "cli/help.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "ps_worker/data/dataset.h"

DEFINE_string(train_files, "", "Files or glob patterns (comma-separated).");
DEFINE_string(format, "libsvm", "libsvm, tfrecord, criteo_tsv, csv or idx.");
DEFINE_string(threads, "1,2", "Parsing thread counts to compare.");
DEFINE_int32(batch_size, 1024, "Examples per batch.");
DEFINE_int32(rounds, 3, "Rounds; medians are reported.");
DEFINE_int64(criteo_buckets, 0, "criteo_tsv: see ps_worker --criteo_buckets.");

namespace psrt {
namespace {

struct Run {
  int64_t examples = 0;
  double seconds = 0;
};

absl::StatusOr<Run> ReadAll(const std::vector<std::string>& patterns,
                            int threads) {
  DatasetOptions o;
  o.patterns = patterns;
  o.reader.format = FLAGS_format;
  o.reader.criteo_buckets = FLAGS_criteo_buckets;
  o.batch_size = FLAGS_batch_size;
  o.reader_threads = threads;
  const absl::Time start = absl::Now();
  auto dataset = Dataset::Create(o);
  if (!dataset.ok()) return dataset.status();
  Run run;
  Batch batch;
  while (true) {
    absl::StatusOr<bool> more = (*dataset)->Next(&batch);
    if (!more.ok()) return more.status();
    if (!*more) break;
    run.examples += batch.size;
  }
  run.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return run;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Main() {
  std::vector<std::string> patterns =
      absl::StrSplit(FLAGS_train_files, ',', absl::SkipEmpty());
  if (patterns.empty()) {
    std::cerr << "reader_bench: --train_files is required\n";
    return 2;
  }
  auto files = Dataset::ExpandPatterns(patterns, 0);
  if (!files.ok()) {
    std::cerr << "reader_bench: " << files.status() << "\n";
    return 2;
  }
  int64_t bytes = 0;
  for (const std::string& f : *files) {
    struct stat st;
    if (stat(f.c_str(), &st) == 0) bytes += st.st_size;
  }
  std::vector<int> counts;
  for (absl::string_view t : absl::StrSplit(FLAGS_threads, ',')) {
    int n;
    if (!absl::SimpleAtoi(t, &n) || n < 1) {
      std::cerr << "reader_bench: --threads: '" << t << "' is not a count\n";
      return 2;
    }
    counts.push_back(n);
  }
  std::cout << absl::StrFormat(
                   "reader_bench: %s, %d files, %.1f MB, batch %d, %d rounds",
                   FLAGS_format, files->size(), bytes / 1e6, FLAGS_batch_size,
                   FLAGS_rounds)
            << std::endl;
  std::map<int, std::vector<double>> rates;  // threads -> examples/s
  int64_t examples = 0;
  for (int round = 0; round < FLAGS_rounds; ++round) {
    for (int threads : counts) {
      auto run = ReadAll(patterns, threads);
      if (!run.ok()) {
        std::cerr << "reader_bench: " << run.status() << "\n";
        return 1;
      }
      examples = run->examples;
      const double rate = run->examples / run->seconds;
      rates[threads].push_back(rate);
      std::cout << absl::StrFormat(
                       "round %d threads %d: %d examples in %.2f s, %.0f "
                       "examples/s, %.1f MB/s",
                       round + 1, threads, run->examples, run->seconds, rate,
                       bytes / 1e6 / run->seconds)
                << std::endl;
    }
  }
  const double first = Median(rates[counts[0]]);
  std::cout << absl::StrFormat("%s, %d examples, medians:", FLAGS_format,
                               examples)
            << std::endl;
  for (int threads : counts) {
    const double rate = Median(rates[threads]);
    const double mb_per_s = rate / examples * bytes / 1e6;
    std::cout << absl::StrFormat(
                     "  threads %2d: %9.0f examples/s %7.1f MB/s  %6.1f MB/s "
                     "per thread  %.2fx threads %d",
                     threads, rate, mb_per_s, mb_per_s / threads, rate / first,
                     counts[0])
              << std::endl;
  }
  return 0;
}

}  // namespace
}  // namespace psrt

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "Input pipeline throughput per format and parsing thread count.\n"
      "  reader_bench --format=libsvm --train_files='data/train-*' "
      "--threads=1,2");
  FLAGS_logtostderr = true;
  psrt::HandleHelpFlag(argc, argv, "tools/reader_bench/");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  return psrt::Main();
}

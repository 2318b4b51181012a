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
//
// --caches adds, per thread count, epochs served by ps_worker's --cache:
// "memory" (the second epoch of a dataset caching in memory) and "disk"
// (an epoch read from the file --cache_dir holds, built before the first
// round, as a later run over the same inputs reads it), each with its own
// MB/s of cache read (disk: the file's size) -- so parsing can be compared
// with not parsing.
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
DEFINE_string(caches, "files",
              "Comma-separated sources to time: files (parsing), memory "
              "(the second epoch of --cache=memory), disk (an epoch from "
              "the --cache_dir file).");
DEFINE_string(cache_dir, "/tmp/psrt_reader_bench_cache",
              "Where the disk cache is built (a file per input set).");

namespace psrt {
namespace {

struct Run {
  int64_t examples = 0;
  double seconds = 0;
  int64_t cache_bytes = 0;  // the cache's size (memory or disk), if any
};

// Reads the files once through a Dataset with `threads`, from `cache`:
// "files" times the whole read; "memory" reads two epochs and times the
// second (from memory); "disk" times one epoch from the --cache_dir file
// (which must exist: see BuildDiskCache).
DatasetOptions Options(const std::vector<std::string>& patterns, int threads) {
  DatasetOptions o;
  o.patterns = patterns;
  o.reader.format = FLAGS_format;
  o.reader.criteo_buckets = FLAGS_criteo_buckets;
  o.batch_size = FLAGS_batch_size;
  o.reader_threads = threads;
  return o;
}

absl::StatusOr<Run> ReadAll(const std::vector<std::string>& patterns,
                            int threads, const std::string& cache) {
  DatasetOptions o = Options(patterns, threads);
  o.epochs = cache == "memory" ? 2 : 1;
  o.cache_in_memory = cache == "memory";
  if (cache == "disk") o.cache_dir = FLAGS_cache_dir;
  absl::Time start = absl::Now();
  auto dataset = Dataset::Create(o);
  if (!dataset.ok()) return dataset.status();
  Run run;
  Batch batch;
  bool timing = cache != "memory";
  int64_t first_epoch = 0;
  while (true) {
    absl::StatusOr<bool> more = (*dataset)->Next(&batch);
    if (!more.ok()) return more.status();
    if (!*more) break;
    if (!timing) {
      // The second epoch, from memory, starts once every record the first
      // read from the files was consumed.
      first_epoch += batch.size;
      const Dataset::Stats stats = (*dataset)->stats();
      if (stats.epoch >= 1 && first_epoch >= stats.records) {
        timing = true;
        start = absl::Now();
      }
      continue;
    }
    run.examples += batch.size;
  }
  run.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const Dataset::Stats stats = (*dataset)->stats();
  run.cache_bytes = stats.cached_bytes;
  if (cache == "disk" && stats.records > 0) {
    return absl::FailedPreconditionError(
        "the disk cache was not used (the files were parsed)");
  }
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
  const std::vector<std::string> caches =
      absl::StrSplit(FLAGS_caches, ',', absl::SkipEmpty());
  for (const std::string& cache : caches) {
    if (cache != "files" && cache != "memory" && cache != "disk") {
      std::cerr << "reader_bench: --caches: '" << cache
                << "' is not files, memory or disk\n";
      return 2;
    }
    if (cache == "disk") {
      // Built (or found) once, by a first epoch that caches.
      DatasetOptions o = Options(patterns, 1);
      o.cache_dir = FLAGS_cache_dir;
      auto build = Dataset::Create(o);
      Batch batch;
      while (build.ok() && *(*build)->Next(&batch)) {
      }
      if (!build.ok()) {
        std::cerr << "reader_bench: " << build.status() << "\n";
        return 1;
      }
    }
  }
  // (source, threads) -> examples/s
  std::map<std::pair<std::string, int>, std::vector<double>> rates;
  std::map<std::string, int64_t> cache_bytes;
  int64_t examples = 0;
  for (int round = 0; round < FLAGS_rounds; ++round) {
    for (const std::string& cache : caches) {
      for (int threads : counts) {
        auto run = ReadAll(patterns, threads, cache);
        if (!run.ok()) {
          std::cerr << "reader_bench: " << run.status() << "\n";
          return 1;
        }
        examples = run->examples;
        cache_bytes[cache] = cache == "files" ? bytes : run->cache_bytes;
        const double rate = run->examples / run->seconds;
        rates[{cache, threads}].push_back(rate);
        std::cout << absl::StrFormat(
                         "round %d %s threads %d: %d examples in %.2f s, "
                         "%.0f examples/s, %.1f MB/s",
                         round + 1, cache, threads, run->examples, run->seconds,
                         rate, cache_bytes[cache] / 1e6 / run->seconds)
                  << std::endl;
      }
    }
  }
  const double first = Median(rates[{caches[0], counts[0]}]);
  std::cout << absl::StrFormat("%s, %d examples, medians:", FLAGS_format,
                               examples)
            << std::endl;
  for (const std::string& cache : caches) {
    for (int threads : counts) {
      const double rate = Median(rates[{cache, threads}]);
      const double mb_per_s = rate / examples * cache_bytes[cache] / 1e6;
      std::cout << absl::StrFormat(
                       "  %-6s threads %2d: %9.0f examples/s %7.1f MB/s  "
                       "%6.1f MB/s per thread  %.2fx %s threads %d",
                       cache, threads, rate, mb_per_s, mb_per_s / threads,
                       rate / first, caches[0], counts[0])
                << std::endl;
    }
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

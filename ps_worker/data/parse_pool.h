// Parses records on several threads while one thread reads them: the reader
// thread fills a RawChunk with records framed by RecordReader::ReadRaw and
// submits it; pool threads run RecordReader::Parse over it; chunks come back
// in the order they were submitted, so the examples' order is the same for
// any thread count (dataset.h's --reader_threads).
//
//   ParsePool pool(4);
//   auto chunk = pool.NewChunk(reader);       // reused buffers when free
//   ... chunk->Append() / ReadRaw into chunk->raw.back() ...
//   pool.Submit(std::move(chunk));
//   std::unique_ptr<RawChunk> done = pool.TakeOldest();   // parsed
//   ... use done->examples[0, done->parsed) ..., then pool.Recycle(done)
#ifndef PSRT_PS_WORKER_DATA_PARSE_POOL_H_
#define PSRT_PS_WORKER_DATA_PARSE_POOL_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "ps_worker/data/example.h"
#include "ps_worker/data/record_reader.h"

namespace psrt {

struct RawChunk {
  // The reader that framed the records: parses them and names positions.
  std::shared_ptr<const RecordReader> reader;
  // Records [0, size): raw bytes and their RecordReader::index().
  std::vector<std::string> raw;
  std::vector<int64_t> index;
  size_t size = 0;

  // Filled by the pool. Records [0, parsed) were parsed or skipped;
  // kept[i] says which. If `error` is set, record `parsed` failed to parse
  // (its position in the message) and the records after it were not parsed.
  std::vector<Example> examples;
  std::vector<char> kept;
  size_t parsed = 0;
  absl::Status error;
  // Records skipped as bad (skip_bad_records), with their errors.
  std::vector<absl::Status> skipped;

  // The next record's slot: raw.back()-style access to a reused string.
  std::string* Append(int64_t record_index);
};

class ParsePool {
 public:
  // REQUIRES: threads >= 1.
  explicit ParsePool(int threads);
  // Waits for the chunks being parsed; discards the rest.
  ~ParsePool();
  ParsePool(const ParsePool&) = delete;
  ParsePool& operator=(const ParsePool&) = delete;

  int threads() const { return static_cast<int>(threads_.size()); }

  // An empty chunk for `reader`'s records (a recycled one when available).
  std::unique_ptr<RawChunk> NewChunk(
      std::shared_ptr<const RecordReader> reader);
  void Submit(std::unique_ptr<RawChunk> chunk);
  // Chunks submitted and not yet taken.
  size_t pending() const;
  // Waits until the oldest submitted chunk is parsed and returns it; null if
  // none is pending.
  std::unique_ptr<RawChunk> TakeOldest();
  // Gives a taken chunk's buffers back for NewChunk.
  void Recycle(std::unique_ptr<RawChunk> chunk);

 private:
  struct Slot {
    std::unique_ptr<RawChunk> chunk;
    bool started = false;
    bool done = false;
  };
  void Work();
  Slot* FirstUnstarted() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool WorkOrStopping() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void ParseChunk(RawChunk* chunk);

  mutable absl::Mutex mu_;
  std::deque<Slot> slots_ ABSL_GUARDED_BY(mu_);  // submission order
  std::vector<std::unique_ptr<RawChunk>> free_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace psrt

#endif  // PSRT_PS_WORKER_DATA_PARSE_POOL_H_

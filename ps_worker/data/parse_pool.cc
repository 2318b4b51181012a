#include "ps_worker/data/parse_pool.h"

namespace psrt {

std::string* RawChunk::Append(int64_t record_index) {
  if (raw.size() == size) {
    raw.emplace_back();
    index.emplace_back();
  }
  index[size] = record_index;
  return &raw[size++];
}

ParsePool::ParsePool(int threads) {
  for (int t = 0; t < threads; ++t) threads_.emplace_back([this] { Work(); });
}

ParsePool::~ParsePool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

std::unique_ptr<RawChunk> ParsePool::NewChunk(
    std::shared_ptr<const RecordReader> reader) {
  std::unique_ptr<RawChunk> chunk;
  {
    absl::MutexLock lock(&mu_);
    if (!free_.empty()) {
      chunk = std::move(free_.back());
      free_.pop_back();
    }
  }
  if (chunk == nullptr) chunk = std::make_unique<RawChunk>();
  chunk->reader = std::move(reader);
  chunk->size = 0;
  chunk->parsed = 0;
  chunk->error = absl::OkStatus();
  chunk->skipped.clear();
  return chunk;
}

void ParsePool::Submit(std::unique_ptr<RawChunk> chunk) {
  absl::MutexLock lock(&mu_);
  slots_.push_back(Slot{std::move(chunk)});
}

size_t ParsePool::pending() const {
  absl::MutexLock lock(&mu_);
  return slots_.size();
}

std::unique_ptr<RawChunk> ParsePool::TakeOldest() {
  absl::MutexLock lock(&mu_);
  if (slots_.empty()) return nullptr;
  mu_.Await(absl::Condition(
      +[](std::deque<Slot>* slots) { return slots->front().done; }, &slots_));
  std::unique_ptr<RawChunk> chunk = std::move(slots_.front().chunk);
  slots_.pop_front();
  return chunk;
}

void ParsePool::Recycle(std::unique_ptr<RawChunk> chunk) {
  chunk->reader.reset();  // the file may close
  absl::MutexLock lock(&mu_);
  free_.push_back(std::move(chunk));
}

ParsePool::Slot* ParsePool::FirstUnstarted() {
  for (Slot& s : slots_) {
    if (!s.started) return &s;
  }
  return nullptr;
}

bool ParsePool::WorkOrStopping() {
  return stopping_ || FirstUnstarted() != nullptr;
}

void ParsePool::Work() {
  while (true) {
    Slot* slot = nullptr;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &ParsePool::WorkOrStopping));
      if (stopping_) return;
      slot = FirstUnstarted();
      slot->started = true;
    }
    // Slots leave the deque only once done, and a deque's push_back and
    // pop_front keep other elements in place: `slot` stays this chunk's.
    ParseChunk(slot->chunk.get());
    absl::MutexLock lock(&mu_);
    slot->done = true;
  }
}

void ParsePool::ParseChunk(RawChunk* chunk) {
  if (chunk->examples.size() < chunk->size) chunk->examples.resize(chunk->size);
  chunk->kept.assign(chunk->size, 0);
  const RecordReader& reader = *chunk->reader;
  for (size_t i = 0; i < chunk->size; ++i) {
    const absl::Status s = reader.Parse(chunk->raw[i], &chunk->examples[i]);
    if (s.ok()) {
      chunk->kept[i] = 1;
    } else if (reader.skip_bad_records()) {
      chunk->skipped.push_back(reader.AtPosition(chunk->index[i], s));
    } else {
      chunk->error = reader.AtPosition(chunk->index[i], s);
      chunk->parsed = i;
      return;
    }
  }
  chunk->parsed = chunk->size;
}

}  // namespace psrt

#include "ps_server/shards/row_evictor.h"

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace psrt {

RowEvictor::RowEvictor(ShardStore* store, absl::Duration interval)
    : store_(store), interval_(interval) {
  thread_ = std::thread([this] { Run(); });
}

RowEvictor::~RowEvictor() {
  stop_.Notify();
  thread_.join();
}

void RowEvictor::Run() {
  while (!stop_.WaitForNotificationWithTimeout(interval_)) SweepOnce();
}

int64_t RowEvictor::SweepOnce() {
  int64_t total = 0;
  for (const LocalVariable* v : store_->Variables()) {
    if (!v->layout->spec.has_eviction()) continue;
    // The step each shard's rows are measured against: read once per
    // variable, so a sweep never uses a step newer than its pushes saw.
    const int64_t step = store_->global_step();
    int64_t evicted = 0;
    for (int s = 0; s < v->layout->num_shards(); ++s) {
      if (v->IsPrimary(s)) evicted += v->shard(s).EvictIdleRows(step);
    }
    if (evicted > 0) {
      const EvictionSpec& e = v->layout->spec.eviction();
      LOG(INFO) << "evicted " << evicted << " rows of '" << v->name() << "'"
                << (e.ttl_steps() > 0 ? absl::StrCat(" idle for more than ",
                                                     e.ttl_steps(), " steps")
                                      : "")
                << (e.max_rows() > 0
                        ? absl::StrCat(" (least recently updated, above 90% "
                                       "of max_rows ",
                                       e.max_rows(), ")")
                        : "")
                << " at global step " << step;
    }
    total += evicted;
  }
  return total;
}

}  // namespace psrt

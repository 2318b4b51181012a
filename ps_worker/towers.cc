#include "ps_worker/towers.h"

#include <algorithm>

namespace psrt {

Towers::Towers(const Model* model, int towers)
    : model_(model), slices_(std::max(1, towers)) {
  for (int t = 1; t < size(); ++t)
    threads_.emplace_back([this, t] { Loop(t); });
}

Towers::~Towers() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    work_.SignalAll();
  }
  for (auto& t : threads_) t.join();
}

void Towers::Compute(int tower) {
  // REQUIRES: the job fields are published (read without the lock: they do
  // not change until every tower has finished).
  const Batch& b = *batch_;
  const int n = size();
  const int begin = static_cast<int>(static_cast<int64_t>(b.size) * tower / n);
  const int end =
      static_cast<int>(static_cast<int64_t>(b.size) * (tower + 1) / n);
  Slice& s = slices_[tower];
  s.loss = 0;
  if (begin < end) {
    s.loss = model_->Compute(b, begin, end, 1.0f / b.size, *params_, &s.grads,
                             predictions_ + begin);
  }
}

void Towers::Loop(int tower) {
  uint64_t seen = 0;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      while (!stopping_ && generation_ == seen) work_.Wait(&mu_);
      if (stopping_) return;
      seen = generation_;
    }
    Compute(tower);
    absl::MutexLock lock(&mu_);
    if (--pending_ == 0) done_.Signal();
  }
}

absl::StatusOr<double> Towers::Run(const Batch& batch,
                                   const StepParameters& params,
                                   Gradients* grads, float* predictions) {
  const size_t unique = params.unique_ids.size();
  for (Slice& s : slices_) {
    if (s.grads.tables.empty() && s.grads.dense.empty()) {
      s.grads = model_->NewGradients(unique);
    } else {
      for (size_t t = 0; t < s.grads.tables.size(); ++t) {
        s.grads.tables[t].assign(unique * model_->tables()[t].dim, 0.0f);
      }
      for (auto& d : s.grads.dense) std::fill(d.begin(), d.end(), 0.0f);
    }
  }
  {
    absl::MutexLock lock(&mu_);
    batch_ = &batch;
    params_ = &params;
    predictions_ = predictions;
    pending_ = size() - 1;
    ++generation_;
    work_.SignalAll();
  }
  Compute(0);
  {
    absl::MutexLock lock(&mu_);
    while (pending_ > 0) done_.Wait(&mu_);
  }
  *grads = slices_[0].grads;  // reuses *grads' memory when shapes allow
  double loss = slices_[0].loss;
  for (int t = 1; t < size(); ++t) {
    grads->Add(slices_[t].grads);
    loss += slices_[t].loss;
  }
  return loss;
}

}  // namespace psrt

#include "ps_worker/dense_allreduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "partitioner/variable_spec.h"
#include "util/crc32c.h"

namespace psrt {
namespace {

int64_t Elements(const VariableSpec& spec) {
  int64_t n = 1;
  for (int64_t d : spec.shape()) n *= d;
  return n;
}

template <typename T>
void Append(std::vector<char>* out, const T* data, size_t count) {
  const char* bytes = reinterpret_cast<const char*>(data);
  out->insert(out->end(), bytes, bytes + count * sizeof(T));
}

}  // namespace

absl::StatusOr<std::unique_ptr<DenseAllreduce>> DenseAllreduce::Create(
    std::vector<VariableSpec> specs, Options options) {
  for (VariableSpec& spec : specs) {
    if (spec.kind() != DENSE) {
      return absl::InvalidArgumentError(
          absl::StrCat("--dense_sync=allreduce reduces dense variables only; ",
                       spec.name(), " is ", VariableKind_Name(spec.kind())));
    }
    if (absl::Status s = NormalizeVariableSpec(&spec); !s.ok()) return s;
  }
  return std::unique_ptr<DenseAllreduce>(
      new DenseAllreduce(std::move(specs), std::move(options)));
}

DenseAllreduce::DenseAllreduce(std::vector<VariableSpec> specs, Options options)
    : specs_(std::move(specs)), options_(std::move(options)) {
  for (const VariableSpec& spec : specs_) {
    optimizers_.push_back(CreateOptimizer(spec.optimizer()));
    const Optimizer& optimizer = *optimizers_.back();
    std::vector<std::vector<float>> slots;
    for (int k = 0; k < optimizer.num_slots(); ++k) {
      slots.emplace_back(Elements(spec), optimizer.initial_slot_value(k));
    }
    slots_.push_back(std::move(slots));
  }
}

int64_t DenseAllreduce::floats() const {
  int64_t n = 0;
  for (const std::vector<float>& v : values_) n += v.size();
  return n;
}

uint32_t DenseAllreduce::values_crc32c() const {
  uint32_t crc = 0;
  for (const std::vector<float>& v : values_) {
    crc = Crc32cExtend(crc, v.data(), v.size() * sizeof(float));
  }
  return crc;
}

std::vector<char> DenseAllreduce::SaveState() const {
  std::vector<char> out;
  Append(&out, &updates_, 1);
  Append(&out, &next_step_, 1);
  for (size_t v = 0; v < specs_.size(); ++v) {
    Append(&out, values_[v].data(), values_[v].size());
    for (const std::vector<float>& slot : slots_[v]) {
      Append(&out, slot.data(), slot.size());
    }
  }
  return out;
}

absl::Status DenseAllreduce::LoadState(const std::vector<char>& bytes) {
  const char* at = bytes.data();
  auto take = [&](void* to, size_t n) {
    std::memcpy(to, at, n);
    at += n;
  };
  take(&updates_, sizeof(updates_));
  take(&next_step_, sizeof(next_step_));
  for (size_t v = 0; v < specs_.size(); ++v) {
    take(values_[v].data(), values_[v].size() * sizeof(float));
    for (std::vector<float>& slot : slots_[v]) {
      take(slot.data(), slot.size() * sizeof(float));
    }
  }
  return at == bytes.data() + bytes.size()
             ? absl::OkStatus()
             : absl::InternalError("dense state size mismatch");
}

absl::Status DenseAllreduce::Start(std::vector<std::vector<float>> values,
                                   int64_t next_step) {
  if (values.size() != specs_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DenseAllreduce::Start: ", values.size(), " values for ",
                     specs_.size(), " dense variables"));
  }
  for (size_t v = 0; v < specs_.size(); ++v) {
    if (static_cast<int64_t>(values[v].size()) != Elements(specs_[v])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "DenseAllreduce::Start: ", values[v].size(), " values for ",
          specs_[v].name(), " of ", Elements(specs_[v])));
    }
  }
  values_ = std::move(values);
  next_step_ = next_step;
  absl::StatusOr<int64_t> generation =
      AllreduceRing::GenerationToJoin(options_.ring);
  if (!generation.ok()) return generation.status();
  // A worker joining a ring that formed before (it restarted) waits for
  // the survivors: they learn the ring broke within its timeout, agree on
  // who is gone within kAliveMargin, then wait for it to join.
  const absl::Duration join_timeout =
      *generation > 0
          ? options_.ring.timeout + AllreduceRing::kAliveMargin +
                std::max(options_.reform_timeout, options_.ring.timeout)
          : options_.ring.timeout;
  return Form(*generation, /*holds_state=*/false, join_timeout);
}

absl::Status DenseAllreduce::Form(int64_t generation, bool holds_state,
                                  absl::Duration join_timeout) {
  ring_.reset();
  auto ring =
      AllreduceRing::Join(options_.ring, generation, holds_state, join_timeout);
  if (!ring.ok()) return ring.status();
  ring_ = *std::move(ring);
  std::vector<char> state = SaveState();
  const int root = std::max(ring_->state_holder(), 0);
  if (absl::Status s = ring_->Broadcast(state.data(), state.size(), root);
      !s.ok()) {
    return s;
  }
  return LoadState(state);
}

absl::Status DenseAllreduce::Apply(const std::vector<std::vector<float>>& grads,
                                   float learning_rate, int64_t step) {
  if (grads.size() != specs_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DenseAllreduce::Apply: ", grads.size(), " gradients for ",
                     specs_.size(), " dense variables"));
  }
  // The same buffer every step: the ring registered it once.
  size_t total = 0;
  for (size_t v = 0; v < specs_.size(); ++v) {
    if (grads[v].size() != values_[v].size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "DenseAllreduce::Apply: ", grads[v].size(), " gradients for ",
          specs_[v].name(), " of ", values_[v].size()));
    }
    total += grads[v].size();
  }
  fused_.resize(total);
  float* fill = fused_.data();
  for (const std::vector<float>& grad : grads) {
    fill = std::copy(grad.begin(), grad.end(), fill);
  }
  const absl::Time start = absl::Now();
  absl::Status reduced = ring_->Sum(fused_.data(), fused_.size());
  allreduce_time_ += absl::Now() - start;
  ++allreduces_;
  if (!reduced.ok()) {
    if (options_.reform_timeout <= absl::ZeroDuration() ||
        !absl::IsUnavailable(reduced)) {
      return reduced;
    }
    LOG(WARNING) << reduced.message() << "; the ring forms again within "
                 << absl::FormatDuration(options_.reform_timeout)
                 << " (--ring_reform_timeout_secs); step " << step
                 << "'s dense update is dropped";
    ++dropped_updates_;
    next_step_ = step + 1;
    return Form(ring_->generation() + 1, /*holds_state=*/true,
                options_.reform_timeout);
  }
  const float scale = 1.0f / static_cast<float>(options_.ring.num_workers);
  for (float& g : fused_) g *= scale;
  // Every worker holds the same mean: checked and applied alike, all
  // variables or none.
  struct Update {
    UpdateContext context;
    float* slots[2] = {nullptr, nullptr};
    const float* grad;
  };
  std::vector<Update> updates(specs_.size());
  size_t at = 0;
  for (size_t v = 0; v < specs_.size(); ++v) {
    const Optimizer& optimizer = *optimizers_[v];
    Update& update = updates[v];
    update.context = MakeUpdateContext(
        optimizer,
        learning_rate > 0 ? learning_rate
                          : specs_[v].optimizer().learning_rate(),
        updates_ + 1);
    for (size_t k = 0; k < slots_[v].size(); ++k) {
      update.slots[k] = slots_[v][k].data();
    }
    update.grad = fused_.data() + at;
    at += values_[v].size();
    float bad_value = 0;
    const size_t n = values_[v].size();
    const size_t bad = optimizer.FirstNonFiniteResult(
        values_[v].data(), update.slots, update.grad, n, update.context,
        &bad_value);
    if (bad < n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step ", step, ": the all-reduced gradient of ", specs_[v].name(),
          " would make its element ", bad, " ", bad_value, " (from ",
          values_[v][bad], "; mean gradient ", update.grad[bad],
          "); no worker applied it"));
    }
  }
  for (size_t v = 0; v < specs_.size(); ++v) {
    optimizers_[v]->Apply(values_[v].data(), updates[v].slots, updates[v].grad,
                          values_[v].size(), updates[v].context);
  }
  ++updates_;
  next_step_ = step + 1;
  return absl::OkStatus();
}

}  // namespace psrt

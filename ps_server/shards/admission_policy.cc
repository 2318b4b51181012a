#include "ps_server/shards/admission_policy.h"

namespace psrt {

std::unique_ptr<AdmissionPolicy> AdmissionPolicy::For(
    const AdmissionSpec& spec) {
  if (spec.min_count() <= 1) return nullptr;
  return std::unique_ptr<AdmissionPolicy>(
      new AdmissionPolicy(spec.min_count(), spec.sketch_width(),
                          spec.unadmitted_value() == AdmissionSpec::ZEROS));
}

AdmissionPolicy::AdmissionPolicy(int min_count, int64_t sketch_width,
                                 bool zeros)
    : min_count_(min_count),
      zeros_for_unadmitted_(zeros),
      sketch_(sketch_width) {}

bool AdmissionPolicy::MayAdmitNext(int64_t id) const {
  return sketch_.Estimate(id) >= min_count_ - 1;
}

bool AdmissionPolicy::Sight(int64_t id) {
  return sketch_.Increment(id) >= min_count_;
}

}  // namespace psrt

#include "tools/ctr_datagen/planted_ctr_model.h"

#include <algorithm>
#include <cmath>

#include "partitioner/id_hash.h"

namespace psrt {
namespace {

// A standard normal draw that is a pure function of (seed, id, k).
double HashedNormal(uint64_t seed, int64_t id, int k) {
  const uint64_t a = MixId(static_cast<int64_t>(seed ^ MixId(id * 8 + k)));
  const uint64_t b = MixId(static_cast<int64_t>(a + 0x9e3779b97f4a7c15ULL));
  const double u1 = (static_cast<double>(a >> 11) + 0.5) / 9007199254740992.0;
  const double u2 = static_cast<double>(b >> 11) / 9007199254740992.0;
  return std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
}

}  // namespace

PlantedCtrModel::PlantedCtrModel(uint64_t seed, double target_ctr,
                                 double head_rank, double damping)
    : seed_(seed), head_rank_(head_rank), damping_(damping) {
  // Vocabulary sizes from tiny to millions, as in Criteo's 26 fields.
  vocab_ = {4,       10,      30,     100,    300,     1000,    3000,
            10000,   30000,   100000, 300000, 1000000, 3000000, 5000000,
            5000000, 2000000, 500000, 50000,  20000,   5000,    2000,
            500,     200,     50,     20,     8};
  offsets_ = {14};
  shift_.assign(kCategoricalFields, 0);
  for (int c = 0; c < kCategoricalFields; ++c) {
    zipf_exponent_.push_back(vocab_[c] >= 1000000 ? 1.02 : 1.15);
    samplers_.emplace_back(vocab_[c], zipf_exponent_[c]);
    offsets_.push_back(offsets_.back() + vocab_[c]);
  }
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, 1);
  for (int f = 0; f < kDenseFields; ++f) {
    dense_mu_.push_back(0.5 + 0.3 * f);
    dense_w_.push_back(0.12 * normal(rng));
  }
  for (int c = 0; c < kCategoricalFields; ++c) {
    field_sigma_.push_back(
        0.2 + 0.4 * std::uniform_real_distribution<double>(0, 1)(rng));
  }
  // Calibrate the bias so the mean click rate is near target_ctr.
  std::vector<double> logits;
  Example e;
  std::vector<int64_t> counts;
  for (int i = 0; i < 20000; ++i) {
    int64_t ranks[kCategoricalFields];
    Sample(rng, &e, &counts);
    for (int c = 0; c < kCategoricalFields; ++c) {
      ranks[c] = e.ids[kDenseFields + c] - offsets_[c];
    }
    logits.push_back(Logit(e, ranks) - bias_);
  }
  double lo = -10, hi = 10;
  for (int it = 0; it < 60; ++it) {
    const double mid = (lo + hi) / 2;
    double mean = 0;
    for (double z : logits) mean += 1 / (1 + std::exp(-(z + mid)));
    (mean / logits.size() < target_ctr ? lo : hi) = mid;
  }
  bias_ = (lo + hi) / 2;
}

void PlantedCtrModel::set_drift(double fraction) {
  for (int c = 0; c < kCategoricalFields; ++c) {
    shift_[c] =
        vocab_[c] >= 10000
            ? std::max<int64_t>(1, static_cast<int64_t>(fraction * vocab_[c]))
            : 0;
    if (fraction <= 0) shift_[c] = 0;
  }
}

int64_t PlantedCtrModel::SlotId(int c, int64_t slot) const {
  if (slot < vocab_[c]) return offsets_[c] + slot;
  // Past the vocabulary: ids past id_space(), unique per (field, slot).
  return id_space() + (slot - vocab_[c]) * kCategoricalFields + c;
}

double PlantedCtrModel::Damp(int64_t rank) const {
  return std::pow(head_rank_ / (head_rank_ + rank), damping_);
}

double PlantedCtrModel::Weight(int64_t id, int64_t rank, int field) const {
  return field_sigma_[field] * Damp(rank) * HashedNormal(seed_, id, 0);
}

double PlantedCtrModel::Logit(const Example& e, const int64_t* ranks) const {
  double z = bias_;
  for (int f = 0; f < kDenseFields; ++f) z += dense_w_[f] * e.values[f];
  double sum[kFactors] = {0}, sum_sq[kFactors] = {0};
  for (int c = 0; c < kCategoricalFields; ++c) {
    const int64_t id = e.ids[kDenseFields + c];
    const int64_t rank = ranks[c];
    z += Weight(id, rank, c);
    const double damp = Damp(rank);
    for (int k = 0; k < kFactors; ++k) {
      const double v = 0.12 * damp * HashedNormal(seed_, id, 1 + k);
      sum[k] += v;
      sum_sq[k] += v * v;
    }
  }
  for (int k = 0; k < kFactors; ++k) z += 0.5 * (sum[k] * sum[k] - sum_sq[k]);
  return z;
}

}  // namespace psrt

// A known click model that generates CTR-shaped examples: 13 dense fields
// (log-normal counts) and 26 categorical fields with Zipf-distributed ids
// over vocabularies of 4 to 5 million. The label is drawn from
//
//   p = sigmoid(bias + sum_f w_f x_f + sum_c w(id_c)
//               + sum_{c < d} <v(id_c), v(id_d)>)
//
// (a factorization machine, so FM and DeepFM can represent it). Per-id
// weights come from a hash of the id, damped for rare ids (rank r weighs
// head / (head + r)), so the signal sits where data can learn it. Because p
// is known, its AUC on a test set is the best any model can reach there.
//
// Drift (set_drift): the fields of 10,000 ids or more move through an
// unbounded id space. At generation g, rank r of field c is slot
// r + g * shift_c (shift_c = vocab_c * fraction): an id appears in the
// tail, climbs to the head as generations pass (its weight, damped by its
// rank, grows with it) and then is never drawn again, while new ids keep
// arriving. Slots past the vocabulary get ids past id_space().
#ifndef PSRT_TOOLS_CTR_DATAGEN_PLANTED_CTR_MODEL_H_
#define PSRT_TOOLS_CTR_DATAGEN_PLANTED_CTR_MODEL_H_

#include <cstdint>
#include <random>
#include <vector>

#include "ps_worker/data/example.h"
#include "tools/ctr_datagen/zipf_sampler.h"

namespace psrt {

class PlantedCtrModel {
 public:
  static constexpr int kDenseFields = 13;
  static constexpr int kCategoricalFields = 26;
  static constexpr int kFactors = 4;

  // `seed` fixes the model; bias is calibrated to `target_ctr`. An id of
  // rank r weighs (head / (head + r))^damping of a head id.
  PlantedCtrModel(uint64_t seed, double target_ctr, double head_rank = 1000,
                  double damping = 1);

  // Draws one example (39 fields: ids 1..13 with log(1 + count) values,
  // then 26 categorical ids with value 1) and its true click probability.
  // `counts` receives the raw dense counts (for Criteo TSV output).
  template <typename Rng>
  float Sample(Rng& rng, Example* e, std::vector<int64_t>* counts,
               int64_t generation = 0) const;

  // Each generation shifts the large fields by `fraction` of their
  // vocabulary (0: no drift).
  void set_drift(double fraction);

  // Categorical ids are offset_[field] + rank: unique across fields.
  int64_t id_space() const { return offsets_.back(); }

 private:
  double Logit(const Example& e, const int64_t* ranks) const;
  // The id of slot `slot` of field `c` (see Drift above).
  int64_t SlotId(int c, int64_t slot) const;
  double Weight(int64_t id, int64_t rank, int field) const;
  double Damp(int64_t rank) const;

  std::vector<int64_t> vocab_;
  std::vector<double> zipf_exponent_;
  std::vector<ZipfSampler> samplers_;
  std::vector<int64_t> offsets_;  // kCategoricalFields + 1
  std::vector<int64_t> shift_;    // per field, slots per generation
  std::vector<double> dense_mu_, dense_w_, field_sigma_;
  double bias_ = 0;
  uint64_t seed_;
  double head_rank_, damping_;
};

template <typename Rng>
float PlantedCtrModel::Sample(Rng& rng, Example* e,
                              std::vector<int64_t>* counts,
                              int64_t generation) const {
  e->Clear();
  counts->clear();
  std::normal_distribution<double> normal(0, 1);
  for (int f = 0; f < kDenseFields; ++f) {
    const int64_t count = std::max<int64_t>(
        0,
        static_cast<int64_t>(std::exp(dense_mu_[f] + 1.2 * normal(rng))) - 1);
    counts->push_back(count);
    e->ids.push_back(f + 1);
    e->values.push_back(
        static_cast<float>(std::log1p(static_cast<double>(count))));
  }
  int64_t ranks[kCategoricalFields];
  for (int c = 0; c < kCategoricalFields; ++c) {
    ranks[c] = samplers_[c].Sample(rng);
    e->ids.push_back(SlotId(c, ranks[c] + generation * shift_[c]));
    e->values.push_back(1.0f);
  }
  const double p = 1 / (1 + std::exp(-Logit(*e, ranks)));
  e->label =
      std::uniform_real_distribution<double>(0, 1)(rng) < p ? 1.0f : 0.0f;
  return static_cast<float>(p);
}

}  // namespace psrt

#endif  // PSRT_TOOLS_CTR_DATAGEN_PLANTED_CTR_MODEL_H_

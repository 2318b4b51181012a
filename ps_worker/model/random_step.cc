#include "ps_worker/model/random_step.h"

#include <map>
#include <random>

namespace psrt {

RandomStep MakeRandomStep(const Model& model,
                          const RandomStepOptions& options) {
  const ModelConfig& c = model.config();
  std::mt19937 rng(options.seed);
  std::normal_distribution<float> normal(0, 1);
  RandomStep s;
  for (int i = 0; i < options.examples; ++i) {
    Example e;
    e.label = static_cast<float>(rng() % c.classes);
    for (int f = 0; f < c.fields; ++f) {
      e.ids.push_back(rng() % options.id_pool);
      e.values.push_back(options.varied_values ? 0.5f * (1 + rng() % 3) : 1.0f);
    }
    for (int d = 0; d < c.dense_dim; ++d) e.dense.push_back(normal(rng));
    s.batch.Add(e);
  }
  std::map<int64_t, int32_t> slot;
  for (int64_t id : s.batch.ids) {
    auto [it, inserted] =
        slot.emplace(id, static_cast<int32_t>(s.params.unique_ids.size()));
    if (inserted) s.params.unique_ids.push_back(id);
    s.params.slots.push_back(it->second);
  }
  StepParameters shaped = model.NewParameters(s.params.unique_ids.size());
  s.params.dense = shaped.dense;
  s.params.tables = shaped.tables;
  for (auto& v : s.params.dense)
    for (float& x : v) x = options.stddev * normal(rng);
  for (auto& v : s.params.tables)
    for (float& x : v) x = options.stddev * normal(rng);
  return s;
}

}  // namespace psrt

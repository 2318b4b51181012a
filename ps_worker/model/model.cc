#include "ps_worker/model/model.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace psrt {

void Gradients::Add(const Gradients& other) {
  for (size_t i = 0; i < dense.size(); ++i) {
    for (size_t j = 0; j < dense[i].size(); ++j)
      dense[i][j] += other.dense[i][j];
  }
  for (size_t i = 0; i < tables.size(); ++i) {
    for (size_t j = 0; j < tables[i].size(); ++j)
      tables[i][j] += other.tables[i][j];
  }
}

InitializerSpec ZerosInit() { return InitializerSpec(); }

InitializerSpec NormalInit(float stddev, uint64_t seed) {
  InitializerSpec s;
  s.set_kind(InitializerSpec::TRUNCATED_NORMAL);
  s.set_stddev(stddev);
  s.set_seed(seed);
  return s;
}

InitializerSpec GlorotUniformInit(int64_t fan_in, int64_t fan_out,
                                  uint64_t seed) {
  InitializerSpec s;
  s.set_kind(InitializerSpec::UNIFORM);
  const float limit = std::sqrt(6.0f / static_cast<float>(fan_in + fan_out));
  s.set_min(-limit);
  s.set_max(limit);
  s.set_seed(seed);
  return s;
}

int Model::AddTable(const std::string& name, int dim, InitializerSpec init) {
  VariableSpec s;
  s.set_name(name);
  if (config_.vocab > 0) {
    s.set_kind(EMBEDDING);
    s.add_shape(config_.vocab);
  } else {
    s.set_kind(HASH_EMBEDDING);
    s.add_shape(config_.hash_capacity);
    if (config_.admission_min_count > 1) {
      s.mutable_admission()->set_min_count(config_.admission_min_count);
    }
    if (config_.eviction_ttl_steps > 0) {
      s.mutable_eviction()->set_ttl_steps(config_.eviction_ttl_steps);
    }
    if (config_.eviction_max_rows > 0) {
      s.mutable_eviction()->set_max_rows(config_.eviction_max_rows);
    }
    if (config_.ssd_tier) s.mutable_storage()->set_tier(StorageSpec::SSD);
  }
  s.add_shape(dim);
  s.mutable_partition()->set_num_shards(
      config_.embedding_shards > 0 ? config_.embedding_shards : config_.num_ps);
  s.mutable_partition()->set_placement(PartitionSpec::GREEDY_BYTES);
  if (config_.vocab > 0) s.mutable_partition()->set_routing(PartitionSpec::MOD);
  *s.mutable_initializer() = init;
  *s.mutable_optimizer() = config_.embedding_optimizer;
  variables_.push_back(s);
  tables_.push_back({name, dim});
  return static_cast<int>(tables_.size()) - 1;
}

int Model::AddDense(const std::string& name, std::vector<int64_t> shape,
                    InitializerSpec init) {
  VariableSpec s;
  s.set_name(name);
  s.set_kind(DENSE);
  int64_t size = 1;
  for (int64_t d : shape) {
    s.add_shape(d);
    size *= d;
  }
  s.mutable_partition()->set_placement(PartitionSpec::GREEDY_BYTES);
  *s.mutable_initializer() = init;
  *s.mutable_optimizer() = config_.dense_optimizer;
  variables_.push_back(s);
  dense_.push_back({name, size});
  return static_cast<int>(dense_.size()) - 1;
}

absl::Status Model::Check(const Batch& batch) const {
  if (config_.dense_dim > 0 && batch.size > 0 &&
      batch.dense_dim != config_.dense_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        config_.name, " expects ", config_.dense_dim,
        " dense features per example, the data has ", batch.dense_dim));
  }
  for (int i = 0; i < batch.size; ++i) {
    const float label = batch.labels[i];
    const bool ok = config_.classes == 2
                        ? (label == 0.0f || label == 1.0f)
                        : (label >= 0 && label < config_.classes &&
                           label == std::floor(label));
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("label ", label, " is not a class of this ",
                       config_.classes, "-class model"));
    }
  }
  return absl::OkStatus();
}

Gradients Model::NewGradients(size_t unique_ids) const {
  Gradients g;
  for (const auto& d : dense_) g.dense.emplace_back(d.size, 0.0f);
  for (const auto& t : tables_) g.tables.emplace_back(unique_ids * t.dim, 0.0f);
  return g;
}

StepParameters Model::NewParameters(size_t unique_ids) const {
  StepParameters p;
  for (const auto& d : dense_) p.dense.emplace_back(d.size);
  for (const auto& t : tables_) p.tables.emplace_back(unique_ids * t.dim);
  return p;
}

}  // namespace psrt

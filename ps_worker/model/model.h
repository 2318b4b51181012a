// A model the worker trains: the variables it keeps on the PS, and its
// forward and backward pass on CPU (Eigen).
//
// Every embedding table of a model is looked up with the batch's feature
// ids (LR's weights, FM's linear and factor tables, DeepFM's, Wide & Deep's
// wide and deep tables), so one de-duplicated id list serves all tables of a
// step. Dense variables (biases, MLP layers) are pulled whole.
#ifndef PSRT_PS_WORKER_MODEL_MODEL_H_
#define PSRT_PS_WORKER_MODEL_MODEL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/ps.pb.h"
#include "ps_worker/data/example.h"

namespace psrt {

struct ModelConfig {
  std::string name = "deepfm";  // lr, fm, deepfm, wide_deep, mlp
  int fields = 0;  // sparse features per example (FM: any; DeepFM, W&D: fixed)
  int dense_dim = 0;  // dense features per example
  int classes = 2;    // 2: logistic loss; > 2: softmax cross-entropy (MLP)
  int embedding_dim = 8;
  std::vector<int> hidden = {200, 200};
  // Embedding vocabulary: ids in [0, vocab) use an EMBEDDING table; 0 means
  // any int64 id (HASH_EMBEDDING, rows created on first push).
  int64_t vocab = 0;
  int64_t hash_capacity = 0;  // HASH_EMBEDDING row capacity, 0 = unbounded
  // HASH_EMBEDDING feature admission (AdmissionSpec): an id gets a row once
  // pushes carried it this many times; 0 or 1: at once.
  int admission_min_count = 0;
  // HASH_EMBEDDING eviction (EvictionSpec): rows idle this many global
  // steps are dropped by the servers; 0: never.
  int64_t eviction_ttl_steps = 0;
  int64_t eviction_max_rows = 0;  // per table
  bool ssd_tier = false;          // StorageSpec.tier = SSD
  int embedding_shards = 0;       // 0: one per PS
  int num_ps = 1;
  OptimizerSpec embedding_optimizer;
  OptimizerSpec dense_optimizer;
  uint64_t seed = 1;
};

// What one step's computation reads, pulled from the PS.
struct StepParameters {
  std::vector<std::vector<float>> dense;  // per Model::dense_variables()
  std::vector<std::vector<float>>
      tables;  // per Model::tables(): rows of unique_ids
  std::vector<int64_t> unique_ids;
  std::vector<int32_t> slots;  // per batch feature: its row in unique_ids
};

// Gradients with the shapes of StepParameters.
struct Gradients {
  std::vector<std::vector<float>> dense;
  std::vector<std::vector<float>> tables;

  void Zero() {
    for (auto& v : dense) std::fill(v.begin(), v.end(), 0.0f);
    for (auto& v : tables) std::fill(v.begin(), v.end(), 0.0f);
  }
  void Add(const Gradients& other);
};

// A binary model built from the parts in linear_part.h, deep_input.h and
// mlp.h, by index into Model::tables() / dense_variables() (-1: absent).
// What another executor of the model -- the GPU towers in ps_worker/gpu --
// needs to run the same computation as Model::Compute.
struct CtrModelParts {
  int linear_table = -1;  // dim 1: weight per feature id
  int linear_bias = -1;
  int linear_dense = -1;  // weights of the dense features
  int fm_table = -1;      // FM interactions over this table's rows
  int deep_table = -1;    // MLP input: these rows per field, then dense
  int fields = 0;         // fixed fields (deep part)
  int embedding_dim = 0;  // dim of fm_table / deep_table
  int mlp_in = 0;
  std::vector<int> mlp_sizes;    // out size of each layer (ReLU between)
  std::vector<int> mlp_weights;  // [in, out] row-major, per layer
  std::vector<int> mlp_biases;
};

class Model {
 public:
  struct Table {
    std::string name;
    int dim;
  };
  struct DenseVariable {
    std::string name;
    int64_t size;
  };

  virtual ~Model() = default;

  // Every variable, in creation order (the same in every process).
  const std::vector<VariableSpec>& variables() const { return variables_; }
  const std::vector<Table>& tables() const { return tables_; }
  const std::vector<DenseVariable>& dense_variables() const { return dense_; }
  const ModelConfig& config() const { return config_; }
  int classes() const { return config_.classes; }

  // A clear error if the batch does not fit (field count, dense size,
  // labels).
  virtual absl::Status Check(const Batch& batch) const;

  // For examples [begin, end) of `batch`: writes predictions (probability
  // of class 1, or the predicted class for multiclass models) to
  // predictions[0, end - begin), and -- if `grads` is not null -- adds the
  // gradient of scale * sum of their losses. Returns the sum of losses.
  // Thread-safe: towers call it concurrently on disjoint slices.
  virtual double Compute(const Batch& batch, int begin, int end, float scale,
                         const StepParameters& params, Gradients* grads,
                         float* predictions) const = 0;

  // The model's structure for other executors; null if it has none (then
  // only Compute runs it).
  virtual const CtrModelParts* ctr_parts() const { return nullptr; }

  // Gradients shaped for `params` (zeroed).
  Gradients NewGradients(size_t unique_ids) const;
  // StepParameters shaped for `unique_ids` rows (values unset).
  StepParameters NewParameters(size_t unique_ids) const;

 protected:
  explicit Model(ModelConfig config) : config_(std::move(config)) {}
  // Registration helpers for subclasses' constructors.
  int AddTable(const std::string& name, int dim, InitializerSpec init);
  int AddDense(const std::string& name, std::vector<int64_t> shape,
               InitializerSpec init);

  ModelConfig config_;

 private:
  std::vector<VariableSpec> variables_;
  std::vector<Table> tables_;
  std::vector<DenseVariable> dense_;
};

absl::StatusOr<std::unique_ptr<Model>> CreateModel(const ModelConfig& config);

// Initializers used by the models.
InitializerSpec ZerosInit();
InitializerSpec NormalInit(float stddev, uint64_t seed);
InitializerSpec GlorotUniformInit(int64_t fan_in, int64_t fan_out,
                                  uint64_t seed);

}  // namespace psrt

#endif  // PSRT_PS_WORKER_MODEL_MODEL_H_

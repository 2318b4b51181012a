#include "absl/strings/str_cat.h"
#include "partitioner/variable_spec.h"
#include "ps_worker/model/model.h"
#include "ps_worker/model/models.h"

namespace psrt {

absl::StatusOr<std::unique_ptr<Model>> CreateModel(const ModelConfig& config) {
  const std::string& name = config.name;
  if ((name == "deepfm" || name == "wide_deep") && config.fields < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " needs the number of fields per example (--fields)"));
  }
  if (config.embedding_dim < 1) {
    return absl::InvalidArgumentError("embedding_dim must be >= 1");
  }
  for (int h : config.hidden) {
    if (h < 1)
      return absl::InvalidArgumentError("hidden layer sizes must be >= 1");
  }
  if (config.classes < 2)
    return absl::InvalidArgumentError("classes must be >= 2");
  if (config.classes > 2 && name != "mlp") {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is binary; only mlp takes classes > 2"));
  }
  std::unique_ptr<Model> model;
  if (name == "lr") {
    model = NewLrModel(config);
  } else if (name == "fm") {
    model = NewFmModel(config);
  } else if (name == "deepfm") {
    model = NewDeepFmModel(config);
  } else if (name == "wide_deep") {
    model = NewWideDeepModel(config);
  } else if (name == "mlp") {
    model = NewMlpModel(config);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown model '", name, "' (lr, fm, deepfm, wide_deep, mlp)"));
  }
  for (VariableSpec spec : model->variables()) {
    if (absl::Status s = NormalizeVariableSpec(&spec); !s.ok()) return s;
  }
  return model;
}

}  // namespace psrt

// The models psrt's worker trains. Each keeps its parameters on the PS as
// the variables it declares (names prefixed with the model's name).
//
//   lr         logistic regression: linear part
//   fm         factorization machine (Rendle 2010): linear + pairwise
//              interactions of k-dim factors
//   deepfm     DeepFM (Guo et al. 2017): FM plus an MLP over the fields'
//              value-scaled factors (and dense features); fixed fields
//   wide_deep  Wide & Deep (Cheng et al. 2016): a linear model over all
//              sparse features (crosses included) plus an MLP over field
//              embeddings and dense features; fixed fields
//   mlp        an MLP over dense features (softmax for > 2 classes)
#ifndef PSRT_PS_WORKER_MODEL_MODELS_H_
#define PSRT_PS_WORKER_MODEL_MODELS_H_

#include <memory>

#include "ps_worker/model/model.h"

namespace psrt {

std::unique_ptr<Model> NewLrModel(const ModelConfig& config);
std::unique_ptr<Model> NewFmModel(const ModelConfig& config);
std::unique_ptr<Model> NewDeepFmModel(const ModelConfig& config);
std::unique_ptr<Model> NewWideDeepModel(const ModelConfig& config);
std::unique_ptr<Model> NewMlpModel(const ModelConfig& config);

}  // namespace psrt

#endif  // PSRT_PS_WORKER_MODEL_MODELS_H_

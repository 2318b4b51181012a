// Losses on logits, with their gradients.
#ifndef PSRT_PS_WORKER_MODEL_LOSS_H_
#define PSRT_PS_WORKER_MODEL_LOSS_H_

namespace psrt {

// Binary cross-entropy of sigmoid(z) against 0/1 labels. Writes p =
// sigmoid(z) and, if dz is not null, dz = scale * (p - y). Returns the sum of
// the n losses.
double LogisticLoss(const float* z, const float* labels, int n, float scale,
                    float* dz, float* p);

// Softmax cross-entropy over rows of `classes` logits. Writes the predicted
// (arg-max) class and, if dz is not null, dz = scale * (softmax - onehot).
// Returns the sum of the n losses.
double SoftmaxCrossEntropy(const float* z, const float* labels, int n,
                           int classes, float scale, float* dz,
                           float* predicted);

}  // namespace psrt

#endif  // PSRT_PS_WORKER_MODEL_LOSS_H_

// Mlp's gradients are a function of the data alone: two runs on the same
// data give the same bits (the sync-mode failover test compares a run's
// final parameters with a control run's, bit for bit).
#include "ps_worker/model/mlp.h"

#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace psrt {
namespace {

// The output layer's bias gradient is the sum of d(out) over the batch,
// added in row order: bit for bit the sequential sum, wherever the
// buffers lie (a vectorized reduction would start its lanes at the first
// aligned element, so its rounding would follow the buffer's address).
TEST(MlpTest, BiasGradientIsTheInOrderSumWhateverTheAlignment) {
  Mlp mlp;
  std::vector<std::vector<int64_t>> shapes;
  mlp.Declare(
      "m", 5, {16}, 1, 7,
      [&](const std::string&, std::vector<int64_t> shape, InitializerSpec) {
        shapes.push_back(shape);
        return static_cast<int>(shapes.size()) - 1;
      });
  std::mt19937 random(3);
  std::uniform_real_distribution<float> value(-1, 1);
  StepParameters params;
  for (const auto& shape : shapes) {
    int64_t size = 1;
    for (int64_t d : shape) size *= d;
    params.dense.emplace_back(size);
    for (float& v : params.dense.back()) v = value(random);
  }
  const int n = 203;  // not a multiple of any vector width
  std::vector<float> x(n * 5);
  for (float& v : x) v = value(random);
  Mlp::Cache cache;
  mlp.Forward(x.data(), n, params, &cache);
  // d(out) at each offset of a larger buffer: every alignment mod 64.
  std::vector<float> storage(n + 16);
  for (float& v : storage) v = value(random) * 1e3f;
  const int out_bias = mlp.bias_indices().back();
  for (int offset = 0; offset < 16; ++offset) {
    const float* dout = storage.data() + offset;
    float expected = 0;
    for (int r = 0; r < n; ++r) expected += dout[r];
    Gradients grads;
    for (const auto& p : params.dense) grads.dense.emplace_back(p.size(), 0.f);
    mlp.Backward(cache, dout, n, params, &grads, nullptr);
    const float got = grads.dense[out_bias][0];
    EXPECT_EQ(std::memcmp(&got, &expected, sizeof(float)), 0)
        << "offset " << offset << ": " << got << " vs in order " << expected;
    // The hidden layer's: d(hidden)[r][j] = dout[r] * w_out[j] where the
    // unit was active (one product each), summed over r in order.
    const std::vector<float>& w_out = params.dense[mlp.weight_indices().back()];
    const std::vector<float>& hidden = cache.layers[1];
    const std::vector<float>& db = grads.dense[mlp.bias_indices()[0]];
    for (int j = 0; j < 16; ++j) {
      float sum = 0;
      for (int r = 0; r < n; ++r) {
        // (volatile: the product rounded on its own, as Eigen's is, not
        // fused into the sum by the compiler.)
        volatile float product = dout[r] * w_out[j];
        if (hidden[r * 16 + j] > 0) sum += product;
      }
      EXPECT_EQ(std::memcmp(&db[j], &sum, sizeof(float)), 0)
          << "unit " << j << ": " << db[j] << " vs in order " << sum;
    }
  }
}

}  // namespace
}  // namespace psrt

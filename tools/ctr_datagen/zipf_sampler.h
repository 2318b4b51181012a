// Samples ranks 1..n with P(k) proportional to k^-exponent, in O(1) time and
// memory per sample (rejection-inversion, Hörmann & Derflinger 1996), so
// vocabularies of millions need no tables.
#ifndef PSRT_TOOLS_CTR_DATAGEN_ZIPF_SAMPLER_H_
#define PSRT_TOOLS_CTR_DATAGEN_ZIPF_SAMPLER_H_

#include <cmath>
#include <cstdint>
#include <random>

namespace psrt {

class ZipfSampler {
 public:
  // REQUIRES: n >= 1, exponent > 0.
  ZipfSampler(int64_t n, double exponent)
      : n_(n),
        s_(exponent),
        h_integral_x1_(HIntegral(1.5) - 1),
        h_integral_n_(HIntegral(n + 0.5)),
        threshold_(2 - HIntegralInverse(HIntegral(2.5) - H(2))) {}

  template <typename Rng>
  int64_t Sample(Rng& rng) const {
    std::uniform_real_distribution<double> unit(0, 1);
    while (true) {
      const double u =
          h_integral_n_ + unit(rng) * (h_integral_x1_ - h_integral_n_);
      const double x = HIntegralInverse(u);
      int64_t k = static_cast<int64_t>(x + 0.5);
      if (k < 1) k = 1;
      if (k > n_) k = n_;
      if (k - x <= threshold_ || u >= HIntegral(k + 0.5) - H(k)) return k;
    }
  }

 private:
  double H(double x) const { return std::exp(-s_ * std::log(x)); }
  double HIntegral(double x) const {
    const double log_x = std::log(x);
    return Helper2((1 - s_) * log_x) * log_x;
  }
  double HIntegralInverse(double x) const {
    double t = x * (1 - s_);
    if (t < -1) t = -1;  // numerical guard
    return std::exp(Helper1(t) * x);
  }
  // log(1 + x) / x and (exp(x) - 1) / x, accurate near 0.
  static double Helper1(double x) {
    return std::fabs(x) > 1e-8 ? std::log1p(x) / x : 1 - x / 2 + x * x / 3;
  }
  static double Helper2(double x) {
    return std::fabs(x) > 1e-8 ? std::expm1(x) / x : 1 + x / 2 + x * x / 6;
  }

  const int64_t n_;
  const double s_;
  const double h_integral_x1_, h_integral_n_, threshold_;
};

}  // namespace psrt

#endif  // PSRT_TOOLS_CTR_DATAGEN_ZIPF_SAMPLER_H_

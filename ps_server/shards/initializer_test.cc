#include "ps_server/shards/initializer.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace psrt {
namespace {

InitializerSpec Spec(InitializerSpec::Kind kind) {
  InitializerSpec s;
  s.set_kind(kind);
  s.set_seed(17);
  s.set_min(-0.5f);
  s.set_max(1.5f);
  s.set_mean(2.0f);
  s.set_stddev(0.5f);
  s.set_value(3.25f);
  return s;
}

struct Moments {
  double mean = 0, stddev = 0, min = 1e30, max = -1e30;
};

Moments Measure(const Initializer& init, int64_t rows, int64_t width) {
  std::vector<float> v(rows * width);
  init.FillRows(0, rows, width, v.data());
  Moments m;
  for (float x : v) {
    m.mean += x;
    m.min = std::min<double>(m.min, x);
    m.max = std::max<double>(m.max, x);
  }
  m.mean /= v.size();
  for (float x : v) m.stddev += (x - m.mean) * (x - m.mean);
  m.stddev = std::sqrt(m.stddev / v.size());
  return m;
}

TEST(InitializerTest, DistributionsHaveTheirMoments) {
  Moments u = Measure(Initializer(Spec(InitializerSpec::UNIFORM)), 10000, 10);
  EXPECT_NEAR(u.mean, 0.5, 0.01);
  EXPECT_NEAR(u.stddev, 2.0 / std::sqrt(12.0), 0.01);
  EXPECT_GE(u.min, -0.5);
  EXPECT_LT(u.max, 1.5);

  Moments n = Measure(Initializer(Spec(InitializerSpec::NORMAL)), 10000, 10);
  EXPECT_NEAR(n.mean, 2.0, 0.01);
  EXPECT_NEAR(n.stddev, 0.5, 0.01);
  // The two values of a pair are independent: columns 0 and 1 (one
  // Box-Muller draw) are uncorrelated, and so are their squares.
  {
    Initializer init(Spec(InitializerSpec::NORMAL));
    const int rows = 100000;
    std::vector<float> v(rows * 2);
    init.FillRows(0, rows, 2, v.data());
    double xy = 0, x2y2 = 0;
    for (int r = 0; r < rows; ++r) {
      const double x = (v[2 * r] - 2.0) / 0.5, y = (v[2 * r + 1] - 2.0) / 0.5;
      xy += x * y;
      x2y2 += (x * x - 1) * (y * y - 1);
    }
    EXPECT_NEAR(xy / rows, 0.0, 0.015);   // 4.5 standard errors
    EXPECT_NEAR(x2y2 / rows, 0.0, 0.03);  // var((x^2-1)(y^2-1)) = 4
  }

  // Truncated at 2 stddev: the stddev of N(0,1) truncated to [-2, 2] is 0.8796.
  Moments t =
      Measure(Initializer(Spec(InitializerSpec::TRUNCATED_NORMAL)), 10000, 10);
  EXPECT_NEAR(t.mean, 2.0, 0.01);
  EXPECT_NEAR(t.stddev, 0.5 * 0.8796, 0.01);
  EXPECT_GE(t.min, 1.0);
  EXPECT_LE(t.max, 3.0);

  Moments c = Measure(Initializer(Spec(InitializerSpec::CONSTANT)), 10, 3);
  EXPECT_EQ(c.min, 3.25);
  EXPECT_EQ(c.max, 3.25);
  Moments z = Measure(Initializer(Spec(InitializerSpec::ZEROS)), 10, 3);
  EXPECT_EQ(z.max, 0.0);
}

TEST(InitializerTest, ValuesDependOnlyOnSeedRowAndColumn) {
  Initializer init(Spec(InitializerSpec::NORMAL));
  std::vector<float> whole(100 * 4);
  init.FillRows(0, 100, 4, whole.data());
  // Rows filled one at a time, in any order, equal the bulk fill.
  std::vector<float> row(4);
  for (int64_t r = 99; r >= 0; --r) {
    init.FillRow(r, 4, row.data());
    for (int c = 0; c < 4; ++c) ASSERT_EQ(row[c], whole[r * 4 + c]);
  }
  // Another seed gives other values; huge and negative ids are fine.
  InitializerSpec other = Spec(InitializerSpec::NORMAL);
  other.set_seed(18);
  EXPECT_NE(Initializer(other).Value(5, 1), init.Value(5, 1));
  // A row filled whole equals its elements computed one by one (FillRow
  // draws each pair once), for odd widths too.
  for (auto kind : {InitializerSpec::NORMAL, InitializerSpec::TRUNCATED_NORMAL,
                    InitializerSpec::UNIFORM}) {
    Initializer k(Spec(kind));
    std::vector<float> five(5);
    k.FillRow(123456789, 5, five.data());
    for (int c = 0; c < 5; ++c) ASSERT_EQ(five[c], k.Value(123456789, c));
  }
  EXPECT_TRUE(std::isfinite(init.Value(-7, 0)));
  EXPECT_TRUE(std::isfinite(init.Value(INT64_MAX, 3)));
}

}  // namespace
}  // namespace psrt

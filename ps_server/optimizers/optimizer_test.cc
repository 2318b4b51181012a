// Each optimizer against a plain scalar transcription of the update rule it
// claims to implement (TF's training ops), over many steps of random
// gradients, and applied in uneven pieces as gradients arrive off the wire.
#include "ps_server/optimizers/optimizer.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "partitioner/variable_spec.h"
#include "ps_server/optimizers/optimizer_reference.h"

namespace psrt {
namespace {

OptimizerSpec Normalized(OptimizerSpec o) {
  VariableSpec v;
  v.set_name("v");
  v.set_kind(DENSE);
  *v.mutable_optimizer() = o;
  EXPECT_TRUE(NormalizeVariableSpec(&v).ok());
  return v.optimizer();
}

class OptimizerTest : public ::testing::TestWithParam<OptimizerSpec> {};

TEST_P(OptimizerTest, MatchesReferenceOverManySteps) {
  const OptimizerSpec spec = Normalized(GetParam());
  auto opt = CreateOptimizer(spec);
  constexpr size_t kN = 103;  // not a multiple of the SIMD width
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0, 1);

  std::vector<float> initial(kN);
  for (float& x : initial) x = normal(rng) * 0.1f;
  ReferenceState ours = ReferenceState::Start(spec, initial);
  ReferenceState ref = ours;
  ASSERT_EQ(opt->num_slots() > 0 ? opt->initial_slot_value(0) : 0.0f,
            opt->num_slots() > 0 ? ref.slot0[0] : 0.0f);

  std::vector<float> g(kN);
  for (int64_t step = 1; step <= 500; ++step) {
    for (float& x : g) x = normal(rng);
    float* slots[] = {ours.slot0.data(), ours.slot1.data()};
    // Apply in uneven pieces, as a gradient arriving in several slices is.
    size_t begin = 0;
    for (size_t piece : {1, 16, 7, 79}) {
      float* piece_slots[] = {slots[0] + begin, slots[1] + begin};
      opt->Apply(ours.params.data() + begin, piece_slots, g.data() + begin,
                 piece, MakeUpdateContext(*opt, spec.learning_rate(), step));
      begin += piece;
    }
    ASSERT_EQ(begin, kN);
    ReferenceUpdate(spec, step, g.data(), &ref);
  }
  for (size_t i = 0; i < kN; ++i) {
    const float tol = 1e-5f * std::max(1.0f, std::fabs(ref.params[i]));
    ASSERT_NEAR(ours.params[i], ref.params[i], tol) << "coordinate " << i;
    ASSERT_NEAR(ours.slot0[i], ref.slot0[i],
                1e-4f * std::max(1.0f, std::fabs(ref.slot0[i])));
    ASSERT_NEAR(ours.slot1[i], ref.slot1[i],
                1e-4f * std::max(1.0f, std::fabs(ref.slot1[i])));
  }
  // The parameters moved away from where they started (by more than the
  // tolerance above could hide): the test cannot pass by doing nothing.
  float moved = 0;
  for (size_t i = 0; i < kN; ++i) {
    moved += std::fabs(ours.params[i] - initial[i]);
  }
  EXPECT_GT(moved / kN, 0.01f);
}

// An update must not depend on how the gradient arrived: applied at once or
// in pieces split at arbitrary (unaligned) offsets, as gRPC slices split a
// push, every element is bit-identical.
TEST_P(OptimizerTest, ResultDoesNotDependOnHowTheUpdateIsSplit) {
  const OptimizerSpec spec = Normalized(GetParam());
  auto opt = CreateOptimizer(spec);
  constexpr size_t kN = 1031;
  std::vector<float> whole(kN), pieces(kN), grad(kN);
  std::vector<float> slots_whole[2], slots_pieces[2];
  for (int k = 0; k < 2; ++k) {
    slots_whole[k].assign(
        kN, k < opt->num_slots() ? opt->initial_slot_value(k) : 0);
    slots_pieces[k] = slots_whole[k];
  }
  for (size_t i = 0; i < kN; ++i) {
    whole[i] = pieces[i] = std::sin(0.37f * i);
  }
  for (int step = 1; step <= 20; ++step) {
    for (size_t i = 0; i < kN; ++i) grad[i] = std::cos(0.11f * i * step) * 3;
    const UpdateContext ctx =
        MakeUpdateContext(*opt, spec.learning_rate(), step);
    float* sw[2] = {slots_whole[0].data(), slots_whole[1].data()};
    opt->Apply(whole.data(), sw, grad.data(), kN, ctx);
    for (size_t begin = 0; begin < kN;) {
      const size_t end = std::min(kN, begin + 1 + (begin * 7 + step) % 61);
      float* sp[2] = {slots_pieces[0].data() + begin,
                      slots_pieces[1].data() + begin};
      opt->Apply(pieces.data() + begin, sp, grad.data() + begin, end - begin,
                 ctx);
      begin = end;
    }
  }
  for (size_t i = 0; i < kN; ++i) {
    ASSERT_EQ(whole[i], pieces[i]) << "element " << i;
    ASSERT_EQ(slots_whole[0][i], slots_pieces[0][i]) << "element " << i;
    ASSERT_EQ(slots_whole[1][i], slots_pieces[1][i]) << "element " << i;
  }
}

OptimizerSpec Make(OptimizerSpec::Kind kind, float lr,
                   std::function<void(OptimizerSpec*)> extra = nullptr) {
  OptimizerSpec o;
  o.set_kind(kind);
  o.set_learning_rate(lr);
  if (extra) extra(&o);
  return o;
}

INSTANTIATE_TEST_SUITE_P(AllOptimizers, OptimizerTest,
                         ::testing::Values(Make(OptimizerSpec::SGD, 0.01f),
                                           Make(OptimizerSpec::MOMENTUM, 0.01f),
                                           Make(OptimizerSpec::MOMENTUM, 0.01f,
                                                [](OptimizerSpec* o) {
                                                  o->set_nesterov(true);
                                                }),
                                           Make(OptimizerSpec::ADAGRAD, 0.1f),
                                           Make(OptimizerSpec::ADAM, 0.001f),
                                           Make(OptimizerSpec::FTRL, 0.05f),
                                           Make(OptimizerSpec::FTRL, 0.05f,
                                                [](OptimizerSpec* o) {
                                                  o->set_l1(0.5f);
                                                  o->set_l2(0.1f);
                                                  o->set_beta(1.0f);
                                                })),
                         [](const auto& info) {
                           return OptimizerSpec::Kind_Name(info.param.kind()) +
                                  std::to_string(info.index);
                         });

TEST(FtrlTest, StrongL1ProducesExactZeros) {
  const OptimizerSpec spec = Normalized(Make(
      OptimizerSpec::FTRL, 0.1f, [](OptimizerSpec* o) { o->set_l1(10.0f); }));
  auto opt = CreateOptimizer(spec);
  std::vector<float> p(8, 0.3f), n(8, 0.1f), z(8, 0.0f), g(8, 0.5f);
  float* slots[] = {n.data(), z.data()};
  opt->Apply(p.data(), slots, g.data(), 8, MakeUpdateContext(*opt, 0.1f, 1));
  for (float v : p) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace psrt

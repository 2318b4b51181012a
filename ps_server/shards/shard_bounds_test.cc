// Updates proven finite by a shard's value bounds skip the dry run (dense)
// or the undo copies and row checks (embeddings). These tests hold that
// shortcut to the rule it replaces: every update is accepted exactly when
// applying it to a copy of the values leaves them all finite, accepted
// updates leave exactly that copy's values, refused ones change nothing --
// over gradients from 1e-40 to 1e38, learning rates from 1e-3 to 1e3,
// restores of huge values in between, and every optimizer and shard kind.
#include "ps_server/shards/shard_bounds.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "partitioner/variable_spec.h"
#include "ps_server/shards/dense_shard.h"
#include "ps_server/shards/embedding_shard.h"
#include "ps_server/shards/hash_embedding_shard.h"
#include "util/finite.h"

namespace psrt {
namespace {

constexpr int64_t kRows = 24;
constexpr int64_t kWidth = 4;

struct Case {
  VariableKind kind;
  OptimizerSpec::Kind optimizer;
  bool nesterov = false;
};

std::string Name(const Case& c) {
  return VariableKind_Name(c.kind) + "/" +
         OptimizerSpec::Kind_Name(c.optimizer) +
         (c.nesterov ? "+nesterov" : "");
}

// A table under test, with the layout and optimizer it needs kept alive.
struct Table {
  std::unique_ptr<ShardMap> map;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<Shard> shard;
};

Table MakeTable(const Case& c) {
  VariableSpec spec;
  spec.set_name("v");
  spec.set_kind(c.kind);
  spec.add_shape(c.kind == HASH_EMBEDDING ? 0 : kRows);
  spec.add_shape(kWidth);
  spec.mutable_partition()->set_num_shards(1);
  spec.mutable_optimizer()->set_kind(c.optimizer);
  spec.mutable_optimizer()->set_learning_rate(1.0f);
  spec.mutable_optimizer()->set_nesterov(c.nesterov);
  spec.mutable_initializer()->set_kind(InitializerSpec::UNIFORM);
  spec.mutable_initializer()->set_min(-2);
  spec.mutable_initializer()->set_max(2);
  EXPECT_TRUE(NormalizeVariableSpec(&spec).ok());
  Table t;
  t.map = std::make_unique<ShardMap>(1);
  EXPECT_TRUE(t.map->Add(spec).ok());
  const VariableLayout& layout = *t.map->Find("v");
  t.optimizer = CreateOptimizer(layout.spec.optimizer());
  Initializer init(layout.spec.initializer());
  switch (c.kind) {
    case DENSE:
      t.shard =
          std::make_unique<DenseShard>(layout, 0, t.optimizer.get(), init);
      break;
    case EMBEDDING:
      t.shard =
          std::make_unique<EmbeddingShard>(layout, 0, t.optimizer.get(), init);
      break;
    default:
      auto hash = std::make_unique<HashEmbeddingShard>(layout, 0,
                                                       t.optimizer.get(), init);
      std::vector<int64_t> ids(kRows);
      for (int64_t i = 0; i < kRows; ++i) ids[i] = 1000 + 7 * i;
      EXPECT_TRUE(hash->EnsureRows(ids).ok());
      t.shard = std::move(hash);
      break;
  }
  return t;
}

// Every row of the shard, [values | slots], in the shard's row order.
std::vector<float> Export(const Shard& shard, std::vector<int64_t>* ids) {
  const int64_t rows = shard.num_rows();
  std::vector<float> out(rows * shard.row_stride());
  ids->assign(rows, 0);
  int64_t version;
  EXPECT_EQ(shard.ExportRows(0, rows, ids->data(), out.data(), &version), rows);
  return out;
}

float RandomValue(std::mt19937_64& rng, double exponent) {
  std::uniform_real_distribution<double> unit(0, 1);
  const double v = unit(rng) * std::pow(10.0, exponent);
  return static_cast<float>(rng() % 2 ? v : -v);
}

// Applies `grad` (one row of kWidth per id, or the whole dense shard) to
// copies of exported rows as the shard would, with the same optimizer.
// Returns whether every value stayed finite.
bool ApplyToCopy(const Case& c, const Table& t, int64_t version,
                 const std::vector<int64_t>& row_of_id,
                 const std::vector<float>& grad, float lr,
                 std::vector<float>* rows) {
  const Optimizer& opt = *t.optimizer;
  const int slots = opt.num_slots();
  const int64_t stride = t.shard->row_stride();
  UpdateContext context = MakeUpdateContext(opt, lr, version + 1);
  if (c.kind == DENSE) {
    // The dense shard applies over its whole contiguous arrays at once.
    const int64_t n = kRows * kWidth;
    std::vector<float> arrays[3];
    for (int a = 0; a <= slots; ++a) {
      arrays[a].resize(n);
      for (int64_t r = 0; r < kRows; ++r) {
        std::memcpy(arrays[a].data() + r * kWidth,
                    rows->data() + r * stride + a * kWidth,
                    kWidth * sizeof(float));
      }
    }
    float* slot_ptrs[2] = {slots > 0 ? arrays[1].data() : nullptr,
                           slots > 1 ? arrays[2].data() : nullptr};
    opt.Apply(arrays[0].data(), slot_ptrs, grad.data(), n, context);
    for (int a = 0; a <= slots; ++a) {
      for (int64_t r = 0; r < kRows; ++r) {
        std::memcpy(rows->data() + r * stride + a * kWidth,
                    arrays[a].data() + r * kWidth, kWidth * sizeof(float));
      }
    }
  } else {
    for (size_t i = 0; i < row_of_id.size(); ++i) {
      float* row = rows->data() + row_of_id[i] * stride;
      float* slot_ptrs[2] = {row + kWidth, row + 2 * kWidth};
      opt.Apply(row, slot_ptrs, grad.data() + i * kWidth, kWidth, context);
    }
  }
  return SpanFinite(rows->data(), rows->size());
}

void RunRandomUpdates(const Case& c, uint64_t seed) {
  SCOPED_TRACE(Name(c));
  Table t = MakeTable(c);
  Shard& shard = *t.shard;
  std::mt19937_64 rng(seed);
  int accepted = 0, refused = 0;
  for (int step = 0; step < 400; ++step) {
    SCOPED_TRACE(step);
    std::vector<int64_t> exported_ids;
    std::vector<float> before = Export(shard, &exported_ids);
    const int64_t stride = shard.row_stride();
    if (rng() % 8 == 0) {
      // A restore: every row's values up to 10^e, most often small again,
      // and slots >= 0 (valid for every optimizer's: accumulators, Adam's
      // v).
      const double e =
          rng() % 3 == 0 ? std::uniform_real_distribution<double>(10, 38)(rng)
                         : std::uniform_real_distribution<double>(-5, 10)(rng);
      // Slots from 10^-40 to 10^e: tiny accumulators and second moments
      // make the largest steps.
      std::vector<float> rows = before;
      for (int64_t r = 0; r < kRows; ++r) {
        for (int64_t k = 0; k < stride; ++k) {
          rows[r * stride + k] =
              k < kWidth ? RandomValue(rng, e)
                         : std::fabs(RandomValue(
                               rng, std::uniform_real_distribution<double>(
                                        -40, e)(rng)));
        }
      }
      ASSERT_TRUE(shard.ImportRows(exported_ids, rows.data()).ok());
      continue;
    }
    // Gradient magnitudes up to 10^e, e in [-40, 5], for a quarter of the
    // updates in [34, 38.5] (near float's limit) and for another in
    // [15, 21] (squares near it); learning rates 10^[-3, 3].
    const uint64_t band = rng() % 4;
    const double e =
        band == 0   ? std::uniform_real_distribution<double>(34, 38.5)(rng)
        : band == 1 ? std::uniform_real_distribution<double>(15, 21)(rng)
                    : std::uniform_real_distribution<double>(-40, 5)(rng);
    const float lr = static_cast<float>(
        std::pow(10.0, std::uniform_real_distribution<double>(-3, 3)(rng)));
    ShardUpdate update;
    update.learning_rate = lr;
    std::vector<int64_t> row_of_id;
    std::vector<float> grad;
    if (c.kind == DENSE) {
      grad.resize(kRows * kWidth);
      update.ranges = {{0, kRows * kWidth,
                        PayloadView::Contiguous(grad.data(), grad.size() * 4)}};
    } else {
      // Distinct rows; ids of a hash table are its exported ids.
      for (int64_t r = 0; r < kRows; ++r) {
        if (rng() % 2) row_of_id.push_back(r);
      }
      if (row_of_id.empty()) row_of_id.push_back(0);
      for (int64_t r : row_of_id) update.ids.push_back(exported_ids[r]);
      grad.resize(row_of_id.size() * kWidth);
    }
    for (float& g : grad) g = rng() % 8 == 0 ? 0.0f : RandomValue(rng, e);
    if (c.kind != DENSE) {
      update.grads = {PayloadView::Contiguous(grad.data(), grad.size() * 4)};
    }
    float max_abs = 0;
    ASSERT_EQ(FirstNonFiniteMaxAbs(grad.data(), grad.size(), &max_abs),
              grad.size());
    update.max_abs_grad = max_abs;

    std::vector<float> expected = before;
    const bool finite =
        ApplyToCopy(c, t, shard.version(), row_of_id, grad, lr, &expected);
    const absl::Status s = shard.ApplyUpdate(update, 1.0f);
    std::vector<int64_t> ids_after;
    const std::vector<float> after = Export(shard, &ids_after);
    ASSERT_EQ(ids_after, exported_ids);
    ASSERT_EQ(s.ok(), finite) << s;
    const std::vector<float>& want = finite ? expected : before;
    ASSERT_EQ(
        0, std::memcmp(after.data(), want.data(), want.size() * sizeof(float)))
        << (finite ? "accepted update differs from the copy"
                   : "refused update changed values");
    (finite ? accepted : refused)++;
  }
  // Both outcomes were exercised, and updates were proven by the bounds.
  const int64_t proven = shard.updates_proven_by_bounds();
  std::printf("%s seed %d: %d accepted (%d by bounds), %d refused\n",
              Name(c).c_str(), static_cast<int>(seed), accepted,
              static_cast<int>(proven), refused);
  EXPECT_GT(accepted, 100);
  EXPECT_GT(refused, 5);
  if (c.optimizer != OptimizerSpec::FTRL) {
    EXPECT_GT(proven, 30);
  }
}

const Case kCases[] = {
    {DENSE, OptimizerSpec::SGD},
    {DENSE, OptimizerSpec::MOMENTUM},
    {DENSE, OptimizerSpec::MOMENTUM, true},
    {DENSE, OptimizerSpec::ADAGRAD},
    {DENSE, OptimizerSpec::ADAM},
    {DENSE, OptimizerSpec::FTRL},
    {EMBEDDING, OptimizerSpec::SGD},
    {EMBEDDING, OptimizerSpec::MOMENTUM},
    {EMBEDDING, OptimizerSpec::ADAGRAD},
    {EMBEDDING, OptimizerSpec::ADAM},
    {EMBEDDING, OptimizerSpec::FTRL},
    {HASH_EMBEDDING, OptimizerSpec::SGD},
    {HASH_EMBEDDING, OptimizerSpec::MOMENTUM, true},
    {HASH_EMBEDDING, OptimizerSpec::ADAGRAD},
    {HASH_EMBEDDING, OptimizerSpec::ADAM},
};

TEST(ShardBoundsTest, UpdatesAreAcceptedExactlyWhenTheyStayFinite) {
  for (const Case& c : kCases) {
    for (uint64_t seed : {1, 2, 3}) RunRandomUpdates(c, seed);
  }
}

// Ordinary training updates (|g| <= 1, lr 0.05) are proven by the bounds:
// no dry run, no undo, for every optimizer that bounds its update; FTRL
// never is.
TEST(ShardBoundsTest, OrdinaryUpdatesAreProvenByTheBounds) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(Name(c));
    Table t = MakeTable(c);
    std::mt19937_64 rng(7);
    std::vector<int64_t> ids;
    Export(*t.shard, &ids);
    for (int step = 0; step < 200; ++step) {
      std::vector<float> grad(kRows * kWidth);
      for (float& g : grad) g = RandomValue(rng, 0);
      ShardUpdate update;
      update.learning_rate = 0.05f;
      const PayloadView view =
          PayloadView::Contiguous(grad.data(), grad.size() * sizeof(float));
      if (c.kind == DENSE) {
        update.ranges = {{0, kRows * kWidth, view}};
      } else {
        update.ids = ids;
        update.grads = {view};
      }
      float max_abs = 0;
      FirstNonFiniteMaxAbs(grad.data(), grad.size(), &max_abs);
      update.max_abs_grad = max_abs;
      ASSERT_TRUE(t.shard->ApplyUpdate(update, 1.0f).ok());
    }
    EXPECT_EQ(t.shard->updates_proven_by_bounds(),
              c.optimizer == OptimizerSpec::FTRL ? 0 : 200);
  }
}

// An update whose gradient magnitude is unknown (+Inf) is never taken on
// trust, even with every value small.
TEST(ShardBoundsTest, UnknownGradientMagnitudeIsCheckedTheOldWay) {
  Table t = MakeTable({DENSE, OptimizerSpec::SGD});
  std::vector<float> grad(kRows * kWidth, 3e38f);
  ShardUpdate update;
  update.learning_rate = 1.0f;
  update.ranges = {{0, kRows * kWidth,
                    PayloadView::Contiguous(grad.data(), grad.size() * 4)}};
  std::vector<int64_t> ids;
  const std::vector<float> before = Export(*t.shard, &ids);
  // 3e38 - (-2..2) stays finite: accepted, by a dry run.
  EXPECT_TRUE(t.shard->ApplyUpdate(update, 1.0f).ok());
  EXPECT_EQ(t.shard->updates_proven_by_bounds(), 0);
  // Twice overflows: refused, nothing changed.
  const std::vector<float> middle = Export(*t.shard, &ids);
  EXPECT_FALSE(t.shard->ApplyUpdate(update, 1.0f).ok());
  EXPECT_EQ(Export(*t.shard, &ids), middle);
  EXPECT_NE(middle, before);
}

}  // namespace
}  // namespace psrt

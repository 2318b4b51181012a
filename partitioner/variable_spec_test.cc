#include "partitioner/variable_spec.h"

#include "gtest/gtest.h"

namespace psrt {
namespace {

VariableSpec Valid() {
  VariableSpec s;
  s.set_name("emb");
  s.set_kind(EMBEDDING);
  s.add_shape(100);
  s.add_shape(8);
  s.mutable_optimizer()->set_kind(OptimizerSpec::ADAM);
  s.mutable_optimizer()->set_learning_rate(0.01f);
  return s;
}

TEST(VariableSpecTest, FillsTensorFlowDefaults) {
  VariableSpec s = Valid();
  ASSERT_TRUE(NormalizeVariableSpec(&s).ok());
  EXPECT_FLOAT_EQ(s.optimizer().beta1(), 0.9f);
  EXPECT_FLOAT_EQ(s.optimizer().beta2(), 0.999f);
  EXPECT_FLOAT_EQ(s.optimizer().epsilon(), 1e-7f);
  s.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
  ASSERT_TRUE(NormalizeVariableSpec(&s).ok());
  EXPECT_FLOAT_EQ(s.optimizer().initial_accumulator_value(), 0.1f);
  EXPECT_EQ(NumRows(s), 100);
  EXPECT_EQ(RowWidth(s), 8);
}

TEST(VariableSpecTest, RejectsBadSpecsNamingVariableAndField) {
  struct Case {
    std::function<void(VariableSpec*)> mutate;
    const char* message;
  } cases[] = {
      {[](VariableSpec* s) { s->set_name(""); }, "name must not be empty"},
      {[](VariableSpec* s) { s->set_name("a b"); }, "may hold only"},
      {[](VariableSpec* s) { s->set_shape(1, 0); },
       "shape[1] = 0 must be positive"},
      {[](VariableSpec* s) { s->add_shape(3); }, "[vocab, dim]"},
      // A row no pull could answer (it crashed the PS on one id).
      {[](VariableSpec* s) {
         s->set_kind(HASH_EMBEDDING);
         s->set_shape(0, 0);
         s->set_shape(1, 100000000000000);
       },
       "row width shape[1] = 100000000000000 is above 1048576 floats"},
      {[](VariableSpec* s) { s->set_shape(1, (1 << 20) + 1); },
       "row width shape[1] = 1048577"},
      {[](VariableSpec* s) { s->set_kind(KIND_UNSPECIFIED); }, "kind must be"},
      {[](VariableSpec* s) {
         s->mutable_partition()->set_routing(PartitionSpec::HASH);
       },
       "use HASH_EMBEDDING"},
      {[](VariableSpec* s) {
         s->mutable_partition()->set_num_shards(2);
         s->mutable_partition()->set_max_shard_bytes(100);
       },
       "not both"},
      {[](VariableSpec* s) { s->mutable_optimizer()->set_learning_rate(0); },
       "learning_rate must be > 0"},
      {[](VariableSpec* s) { s->mutable_optimizer()->set_beta1(1.5f); },
       "adam needs"},
      {[](VariableSpec* s) {
         s->mutable_initializer()->set_kind(InitializerSpec::UNIFORM);
         s->mutable_initializer()->set_min(1);
         s->mutable_initializer()->set_max(1);
       },
       "min < max"},
      {[](VariableSpec* s) {
         s->mutable_initializer()->set_kind(InitializerSpec::NORMAL);
       },
       "stddev > 0"},
      {[](VariableSpec* s) {
         s->set_kind(HASH_EMBEDDING);
         s->set_shape(0, 0);
         s->mutable_partition()->set_max_shard_bytes(1000);
       },
       "bounded capacity"},
      {[](VariableSpec* s) { s->mutable_admission()->set_min_count(3); },
       "admission applies to HASH_EMBEDDING variables only"},
      {[](VariableSpec* s) {
         s->set_kind(HASH_EMBEDDING);
         s->mutable_admission()->set_min_count(256);
       },
       "admission.min_count = 256 must be in [0, 255]"},
      {[](VariableSpec* s) {
         s->set_kind(HASH_EMBEDDING);
         s->mutable_admission()->set_min_count(2);
         s->mutable_admission()->set_sketch_width(63);
       },
       "admission.sketch_width = 63 must be in [64, 2^28]"},
      {[](VariableSpec* s) {
         s->set_kind(HASH_EMBEDDING);
         s->mutable_admission()->set_min_count(2);
         s->mutable_admission()->set_unadmitted_value(
             static_cast<AdmissionSpec::Unadmitted>(9));
       },
       "unknown admission.unadmitted_value 9"},
      {[](VariableSpec* s) { s->mutable_eviction()->set_ttl_steps(5); },
       "eviction applies to HASH_EMBEDDING variables only"},
      {[](VariableSpec* s) {
         s->set_kind(HASH_EMBEDDING);
         s->mutable_eviction()->set_ttl_steps(-1);
       },
       "eviction.ttl_steps = -1 must not be negative"},
      {[](VariableSpec* s) {
         s->set_kind(HASH_EMBEDDING);
         s->mutable_eviction()->set_max_rows(-5);
       },
       "eviction.max_rows = -5 must not be negative"},
      {[](VariableSpec* s) {
         s->set_kind(HASH_EMBEDDING);
         s->mutable_eviction()->set_max_rows(101);  // shape[0] = 100
       },
       "eviction.max_rows = 101 is above shape[0] = 100"},
  };
  for (const auto& c : cases) {
    VariableSpec s = Valid();
    c.mutate(&s);
    absl::Status status = NormalizeVariableSpec(&s);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_NE(status.message().find(c.message), std::string::npos)
        << c.message << " -> " << status;
  }
}

TEST(VariableSpecTest, DescribesAndComparesSpecs) {
  VariableSpec a = Valid();
  ASSERT_TRUE(NormalizeVariableSpec(&a).ok());
  VariableSpec b = a;
  EXPECT_TRUE(SameSpec(a, b));
  b.set_shape(1, 16);
  EXPECT_FALSE(SameSpec(a, b));
  EXPECT_NE(DescribeSpec(b).find("emb: EMBEDDING [100, 16]"), std::string::npos)
      << DescribeSpec(b);
  EXPECT_NE(DescribeSpec(b).find("ADAM(lr=0.01)"), std::string::npos);
}

TEST(VariableSpecTest, AdmissionDefaultsAreFilledAndOneSpellingOfNone) {
  VariableSpec s = Valid();
  s.set_kind(HASH_EMBEDDING);
  s.mutable_admission()->set_min_count(3);
  ASSERT_TRUE(NormalizeVariableSpec(&s).ok());
  EXPECT_EQ(s.admission().sketch_width(), 1 << 20);
  s.mutable_admission()->set_sketch_width(1000);
  ASSERT_TRUE(NormalizeVariableSpec(&s).ok());
  EXPECT_EQ(s.admission().sketch_width(), 1024);  // a power of two
  EXPECT_NE(DescribeSpec(s).find("admission(min_count=3)"), std::string::npos);
  // min_count 0 or 1 is no admission: the same spec as none (identical
  // specs are what every PS compares).
  VariableSpec none = Valid();
  none.set_kind(HASH_EMBEDDING);
  VariableSpec one = none;
  one.mutable_admission()->set_min_count(1);
  ASSERT_TRUE(NormalizeVariableSpec(&none).ok());
  ASSERT_TRUE(NormalizeVariableSpec(&one).ok());
  EXPECT_TRUE(SameSpec(none, one));
  // Eviction: ttl 0 is none, described when set.
  VariableSpec ttl0 = none;
  ttl0.mutable_eviction()->set_ttl_steps(0);
  ASSERT_TRUE(NormalizeVariableSpec(&ttl0).ok());
  EXPECT_TRUE(SameSpec(none, ttl0));
  ttl0.mutable_eviction()->set_ttl_steps(500);
  ASSERT_TRUE(NormalizeVariableSpec(&ttl0).ok());
  EXPECT_NE(DescribeSpec(ttl0).find("eviction(ttl_steps=500)"),
            std::string::npos);
  // max_rows alone is eviction too; within shape[0] it is accepted.
  VariableSpec bounded = none;
  bounded.mutable_eviction()->set_max_rows(100);
  ASSERT_TRUE(NormalizeVariableSpec(&bounded).ok());
  EXPECT_TRUE(bounded.has_eviction());
  EXPECT_NE(DescribeSpec(bounded).find("eviction(max_rows=100)"),
            std::string::npos);
}

}  // namespace
}  // namespace psrt

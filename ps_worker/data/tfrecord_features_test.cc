// --tfrecord_features: the spec's grammar, and per-column tf.Examples as
// Criteo pipelines for TensorFlow write them, read into ids and dense
// floats.
#include "ps_worker/data/tfrecord_features.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/tf_example.pb.h"
#include "ps_worker/data/feature_hash.h"
#include "ps_worker/data/record_reader.h"
#include "ps_worker/data/tfrecord_writer.h"

namespace psrt {
namespace {

TEST(TfRecordFeaturesTest, RangesAndNamesByKind) {
  auto c = ParseTfRecordFeatures("categorical:C1..C26,dense:I1..I13");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->categorical.size(), 26u);
  EXPECT_EQ(c->categorical.front(), "C1");
  EXPECT_EQ(c->categorical.back(), "C26");
  ASSERT_EQ(c->dense.size(), 13u);
  EXPECT_EQ(c->dense[12], "I13");
  auto named = ParseTfRecordFeatures(
      "categorical:site_id, app_id,device_type,dense:hour");
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->categorical,
            (std::vector<std::string>{"site_id", "app_id", "device_type"}));
  EXPECT_EQ(named->dense, (std::vector<std::string>{"hour"}));
}

TEST(TfRecordFeaturesTest, MistakesAreNamed) {
  struct Case {
    const char* spec;
    const char* message;
  } cases[] = {
      {"C1..C26", "comes before any kind:"},
      {"sparse:C1", "unknown kind"},
      {"categorical:C1..D3", "is not a range"},
      {"categorical:C5..C1", "is not a range"},
      {"categorical:C1,dense:C1", "'C1' appears twice"},
      {"categorical:", "names no feature"},
      {"", "names no feature"},
  };
  for (const Case& c : cases) {
    auto parsed = ParseTfRecordFeatures(c.spec);
    ASSERT_FALSE(parsed.ok()) << c.spec;
    EXPECT_NE(parsed.status().message().find(c.message), std::string::npos)
        << c.spec << " -> " << parsed.status();
  }
}

// One tf.Example per row: label, C1 int64, C2 bytes, I1 float, I2 int64.
std::string WriteColumns(const std::string& name) {
  const std::string path = ::testing::TempDir() + "/" + name;
  auto writer = TfRecordWriter::Open(path, /*gzip=*/false);
  EXPECT_TRUE(writer.ok());
  for (int row = 0; row < 3; ++row) {
    tf::Example example;
    auto& f = *example.mutable_features()->mutable_feature();
    f["label"].mutable_int64_list()->add_value(row % 2);
    if (row != 1)
      f["C1"].mutable_int64_list()->add_value(7 + row);  // row 1: absent
    f["C2"].mutable_bytes_list()->add_value(absl::StrCat("site", row));
    f["I1"].mutable_float_list()->add_value(0.5f * row);
    if (row != 2) f["I2"].mutable_int64_list()->add_value(100 + row);
    EXPECT_TRUE((*writer)->WriteRecord(example.SerializeAsString()).ok());
  }
  EXPECT_TRUE((*writer)->Close().ok());
  return path;
}

TEST(TfRecordFeaturesTest, ColumnsBecomeIdsPerColumnAndDenseFloats) {
  const std::string path = WriteColumns("columns.tfrecords");
  ReaderOptions options;
  options.format = "tfrecord";
  auto columns = ParseTfRecordFeatures("categorical:C1..C2,dense:I1..I2");
  ASSERT_TRUE(columns.ok());
  options.columns = *columns;
  auto reader = OpenRecordReader(path, options);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::vector<Example> rows(3);
  for (Example& e : rows) {
    auto more = (*reader)->Next(&e);
    ASSERT_TRUE(more.ok() && *more) << more.status();
  }
  EXPECT_EQ(rows[0].label, 0.0f);
  EXPECT_EQ(rows[1].label, 1.0f);
  EXPECT_EQ(rows[0].ids, (std::vector<int64_t>{HashFeature(0, "7"),
                                               HashFeature(1, "site0")}));
  EXPECT_EQ(rows[0].values, (std::vector<float>{1.0f, 1.0f}));
  // An absent categorical column: its missing id, still one id per column.
  EXPECT_EQ(rows[1].ids, (std::vector<int64_t>{HashFeature(0, ""),
                                               HashFeature(1, "site1")}));
  // The same value in different columns is a different id.
  EXPECT_NE(HashFeature(0, "7"), HashFeature(1, "7"));
  EXPECT_EQ(rows[0].dense, (std::vector<float>{0.0f, 100.0f}));
  EXPECT_EQ(rows[2].dense, (std::vector<float>{1.0f, 0.0f}));  // I2 absent

  // A float column taken for categorical is an error naming it.
  options.columns = *ParseTfRecordFeatures("categorical:I1");
  auto wrong = OpenRecordReader(path, options);
  ASSERT_TRUE(wrong.ok());
  Example e;
  auto got = (*wrong)->Next(&e);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("feature 'I1' is not a int64 or bytes"),
            std::string::npos)
      << got.status();
}

}  // namespace
}  // namespace psrt

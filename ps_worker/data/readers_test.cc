// Readers against real files written by other tools (testdata/, Debian's
// Fashion-MNIST) and against damaged and malformed input.
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "gtest/gtest.h"
#include "ps_worker/data/csv_reader.h"
#include "ps_worker/data/input_file.h"
#include "ps_worker/data/record_reader.h"
#include "ps_worker/data/tfrecord_writer.h"
#include "tests/ci.h"

namespace psrt {
namespace {

const char kValTfRecords[] = "testdata/criteo_deepfm_sagemaker/val.tfrecords";

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/" + name;
}

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary) << contents;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Reads every record; returns the error, if any.
absl::Status ReadAll(const std::string& path, const ReaderOptions& options,
                     std::vector<Example>* out, int64_t* bad = nullptr) {
  auto reader = OpenRecordReader(path, options);
  if (!reader.ok()) return reader.status();
  Example e;
  while (true) {
    absl::StatusOr<bool> more = (*reader)->Next(&e);
    if (!more.ok()) return more.status();
    if (!*more) break;
    out->push_back(e);
  }
  if (bad != nullptr) *bad = (*reader)->bad_records();
  return absl::OkStatus();
}

TEST(TfRecordReaderTest, ReadsTheSageMakerDeepFmValidationFile) {
  ReaderOptions options;
  options.format = "tfrecord";
  std::vector<Example> examples;
  ASSERT_TRUE(ReadAll(kValTfRecords, options, &examples).ok());
  ASSERT_EQ(examples.size(), 10000u);
  int positives = 0;
  int64_t max_id = 0, min_id = INT64_MAX;
  for (const Example& e : examples) {
    ASSERT_EQ(e.ids.size(), 39u);
    ASSERT_EQ(e.values.size(), 39u);
    positives += e.label == 1.0f;
    for (int64_t id : e.ids) {
      max_id = std::max(max_id, id);
      min_id = std::min(min_id, id);
    }
    // Fields 14..39 are one-hot categoricals.
    for (int f = 13; f < 39; ++f) ASSERT_EQ(e.values[f], 1.0f);
  }
  EXPECT_EQ(positives, 2553);
  EXPECT_EQ(min_id, 1);
  EXPECT_EQ(max_id, 117565);
}

TEST(TfRecordReaderTest, CorruptionAndTruncationNameFileAndRecord) {
  const std::string original = ReadFile(kValTfRecords);
  ReaderOptions options;
  options.format = "tfrecord";
  options.skip_bad_records = true;  // framing damage is never skipped

  // Flip one byte inside the data of record 3 (records are ~313 bytes).
  std::string corrupt = original;
  corrupt[2 * 313 + 100] ^= 0x40;
  const std::string corrupt_path = TempPath("corrupt.tfrecords");
  WriteFile(corrupt_path, corrupt);
  std::vector<Example> examples;
  absl::Status s = ReadAll(corrupt_path, options, &examples);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find(corrupt_path + ": record 3: data CRC mismatch"),
            std::string::npos)
      << s;
  EXPECT_EQ(examples.size(), 2u);

  const std::string truncated_path = TempPath("truncated.tfrecords");
  WriteFile(truncated_path, original.substr(0, original.size() - 50));
  examples.clear();
  s = ReadAll(truncated_path, options, &examples);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find(": record 10000: truncated"), std::string::npos)
      << s;
  EXPECT_EQ(examples.size(), 9999u);
}

TEST(TfRecordReaderTest, ReadsGzipTfRecordsWrittenByTfx) {
  ReaderOptions options;
  options.format = "tfrecord";
  options.label_field = "species";
  options.ids_field = "";
  std::vector<Example> examples;
  ASSERT_TRUE(
      ReadAll(
          "testdata/penguin_tfx/Split-train/data_tfrecord-00000-of-00001.gz",
          options, &examples)
          .ok());
  ASSERT_EQ(examples.size(), 234u);
  std::map<float, int> species;
  for (const Example& e : examples) ++species[e.label];
  EXPECT_EQ(species[0], 99);
  EXPECT_EQ(species[1], 46);
  EXPECT_EQ(species[2], 89);
}

TEST(TfRecordWriterTest, RoundTripsPlainAndGzip) {
  for (bool gzip : {false, true}) {
    const std::string path =
        TempPath(gzip ? "rt.tfrecords.gz" : "rt.tfrecords");
    ReaderOptions names;
    names.format = "tfrecord";
    names.dense_field = "dense";
    {
      auto writer = TfRecordWriter::Open(path, gzip);
      ASSERT_TRUE(writer.ok());
      for (int i = 0; i < 100; ++i) {
        Example e;
        e.label = i % 2;
        e.ids = {i, i + 1000000000000LL};
        e.values = {0.5f, 1.5f};
        e.dense = {static_cast<float>(i)};
        ASSERT_TRUE((*writer)->WriteExample(e, names).ok());
      }
      ASSERT_TRUE((*writer)->Close().ok());
    }
    std::vector<Example> back;
    ASSERT_TRUE(ReadAll(path, names, &back).ok());
    ASSERT_EQ(back.size(), 100u);
    EXPECT_EQ(back[7].ids[1], 1000000000007LL);
    EXPECT_EQ(back[7].dense[0], 7.0f);
    EXPECT_EQ(back[7].label, 1.0f);
  }
}

TEST(LibsvmReaderTest, ParsesLibsvmAndLibffmAndReportsBadLines) {
  const std::string path = TempPath("data.libsvm");
  WriteFile(path,
            "1 3:0.5 17:1\n"
            "# a comment\n"
            "\n"
            "-1 0:0:0.25 5:1234:1e-3\n"
            "0 4:x\n"
            "0 7:1.0 oops\n");
  ReaderOptions options;
  std::vector<Example> examples;
  absl::Status s = ReadAll(path, options, &examples);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(path + ":5: bad feature '4:x'"), std::string::npos)
      << s;
  ASSERT_EQ(examples.size(), 2u);
  EXPECT_EQ(examples[0].ids, (std::vector<int64_t>{3, 17}));
  EXPECT_EQ(examples[1].label, 0.0f);  // -1 read as 0
  EXPECT_EQ(examples[1].ids, (std::vector<int64_t>{0, 1234}));
  EXPECT_FLOAT_EQ(examples[1].values[1], 1e-3f);

  options.skip_bad_records = true;
  examples.clear();
  int64_t bad = 0;
  ASSERT_TRUE(ReadAll(path, options, &examples, &bad).ok());
  EXPECT_EQ(examples.size(), 2u);
  EXPECT_EQ(bad, 2);
}

TEST(CriteoTsvReaderTest, ReadsTheCriteoLayout) {
  std::string good = "1";
  for (int i = 0; i < 13; ++i)
    good += i == 2 ? "\t" : "\t" + std::to_string(i * 10);
  for (int i = 0; i < 26; ++i) good += i == 5 ? "\t" : "\t05db9164";
  const std::string path = TempPath("criteo.tsv");
  WriteFile(path, good + "\n" + good + "\n0\t1\t2\n");
  ReaderOptions options;
  options.format = "criteo_tsv";
  std::vector<Example> examples;
  absl::Status s = ReadAll(path, options, &examples);
  EXPECT_NE(s.message().find(path + ":3: has 3 TAB-separated columns, want 40"),
            std::string::npos)
      << s;
  ASSERT_EQ(examples.size(), 2u);
  const Example& e = examples[0];
  ASSERT_EQ(e.ids.size(), 39u);
  EXPECT_EQ(e.ids[0], 1);
  EXPECT_EQ(e.values[2], 0.0f);  // empty integer
  EXPECT_FLOAT_EQ(e.values[3], std::log1p(30.0f));
  // The same token in different fields gets different ids.
  EXPECT_NE(e.ids[13], e.ids[14]);
  EXPECT_EQ(e.ids[13], examples[1].ids[13]);
  options.criteo_buckets = 1000;
  examples.clear();
  ReadAll(path, options, &examples).IgnoreError();
  for (int f = 13; f < 39; ++f) {
    EXPECT_GE(examples[0].ids[f], 14);
    EXPECT_LT(examples[0].ids[f], 1014);
  }
}

TEST(CsvReaderTest, ReadsTheUciAdultFiles) {
  ReaderOptions options;
  options.format = "csv";
  std::vector<Example> train, test;
  ASSERT_TRUE(ReadAll("testdata/adult/adult.data", options, &train).ok());
  ASSERT_TRUE(ReadAll("testdata/adult/adult.test", options, &test).ok());
  ASSERT_EQ(train.size(), 32561u);
  ASSERT_EQ(test.size(), 16281u);  // the '|1x3 Cross validator' line skipped
  auto positives = [](const std::vector<Example>& v) {
    int n = 0;
    for (const Example& e : v) n += e.label == 1.0f;
    return n;
  };
  EXPECT_EQ(positives(train), 7841);
  EXPECT_EQ(positives(test), 3846);  // labels there end with '.'
  int dense, sparse;
  ASSERT_TRUE(DescribeCsvSchema("adult", &dense, &sparse).ok());
  EXPECT_EQ(dense, 5);
  EXPECT_EQ(sparse, 18);  // 8 categorical, 4 bucketized, 6 crosses
  EXPECT_EQ(train[0].dense.size(), 5u);
  EXPECT_EQ(train[0].ids.size(), 18u);
  EXPECT_FLOAT_EQ(train[0].dense[0], 0.39f);  // age 39 * 0.01
}

TEST(CsvReaderTest, SchemaAndFieldCountErrorsAreClear) {
  int dense, sparse;
  EXPECT_NE(DescribeCsvSchema("a:cat", &dense, &sparse)
                .message()
                .find("exactly one column must be the label"),
            std::string::npos);
  EXPECT_NE(DescribeCsvSchema("a:label=1,b:bogus", &dense, &sparse)
                .message()
                .find("kind 'bogus' of b"),
            std::string::npos);
  const std::string path = TempPath("few.csv");
  WriteFile(path, "1, x\n1, x, y\n");
  ReaderOptions options;
  options.format = "csv";
  options.csv_schema = "y:label=1,c:cat";
  std::vector<Example> examples;
  absl::Status s = ReadAll(path, options, &examples);
  EXPECT_NE(s.message().find(path + ":2: has 3 columns, the schema has 2"),
            std::string::npos)
      << s;
}

TEST(IdxReaderTest, ReadsFashionMnist) {
  const std::string images =
      "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
  if (!std::ifstream(images)) {
    PSRT_SKIP_UNLESS_CI(images << " missing: install dataset-fashion-mnist");
  }
  ReaderOptions options;
  options.format = "idx";
  std::vector<Example> examples;
  ASSERT_TRUE(ReadAll(images, options, &examples).ok());
  ASSERT_EQ(examples.size(), 10000u);
  std::map<float, int> per_class;
  for (const Example& e : examples) {
    ASSERT_EQ(e.dense.size(), 784u);
    ++per_class[e.label];
  }
  EXPECT_EQ(per_class.size(), 10u);
  EXPECT_EQ(per_class[3], 1000);
}

// Every record and line crosses the file's reads when they are 13 bytes
// (a prime: records start at every offset of a read): the readers give
// what they give through the default 1 MiB, which holds these files in
// one or two reads. Real files: plain and gzip TFRecords, the Adult CSV;
// LibSVM lines written here.
TEST(RecordReaderTest, RecordsAcrossReadsOfASmallBufferReadTheSame) {
  const std::string libsvm = TempPath("across.libsvm");
  std::string lines;
  for (int i = 0; i < 500; ++i) {
    lines += std::to_string(i % 2) + " " + std::to_string(i) + ":0.5 " +
             std::to_string(1000 + i * 7) + ":1\n";
  }
  WriteFile(libsvm, lines);
  ReaderOptions tfrecord;
  tfrecord.format = "tfrecord";
  ReaderOptions penguins = tfrecord;
  penguins.label_field = "species";
  penguins.ids_field = "";
  ReaderOptions csv;
  csv.format = "csv";
  const struct {
    std::string path;
    ReaderOptions options;
    size_t examples;
  } cases[] = {
      {kValTfRecords, tfrecord, 10000},
      {"testdata/penguin_tfx/Split-train/data_tfrecord-00000-of-00001.gz",
       penguins, 234},
      {"testdata/adult/adult.test", csv, 16281},
      {libsvm, ReaderOptions(), 500},
  };
  for (const auto& c : cases) {
    std::vector<Example> read[2];
    ReaderOptions options = c.options;
    ASSERT_TRUE(ReadAll(c.path, options, &read[0]).ok()) << c.path;
    options.read_buffer_bytes = 13;
    ASSERT_TRUE(ReadAll(c.path, options, &read[1]).ok()) << c.path;
    ASSERT_EQ(read[0].size(), c.examples) << c.path;
    ASSERT_EQ(read[1].size(), c.examples) << c.path;
    for (size_t i = 0; i < c.examples; ++i) {
      ASSERT_EQ(read[1][i].label, read[0][i].label) << c.path << " #" << i;
      ASSERT_EQ(read[1][i].ids, read[0][i].ids) << c.path << " #" << i;
      ASSERT_EQ(read[1][i].values, read[0][i].values) << c.path << " #" << i;
      ASSERT_EQ(read[1][i].dense, read[0][i].dense) << c.path << " #" << i;
    }
  }
  EXPECT_EQ(InputFile::Open(libsvm, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RecordReaderTest, UnknownFormatAndMissingFileAreClear) {
  ReaderOptions options;
  options.format = "parquet";
  EXPECT_NE(OpenRecordReader(kValTfRecords, options)
                .status()
                .message()
                .find("unknown data format 'parquet'"),
            std::string::npos);
  options.format = "libsvm";
  auto missing = OpenRecordReader("/no/such/file", options);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/no/such/file"),
            std::string::npos);
}

}  // namespace
}  // namespace psrt

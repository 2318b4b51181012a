// ctr_datagen: writes CTR-shaped training and test data drawn from a planted
// click model, and reports the planted model's own test AUC and log loss --
// the best any model can reach on that test set.
//
//   ctr_datagen --output_dir=out/ctr --train_examples=1000000 --format=tfrecord
//
// Output: train-0000k-of-0000n.<ext>, test.<ext> and planted.json.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/help.h"
#include "gflags/gflags.h"
#include "ps_worker/data/tfrecord_writer.h"
#include "ps_worker/evaluation.h"
#include "tools/ctr_datagen/planted_ctr_model.h"

DEFINE_string(output_dir, "out/ctr_data", "Where the files go (created).");
DEFINE_string(format, "libsvm", "libsvm, tfrecord or criteo_tsv.");
DEFINE_int64(train_examples, 1000000, "Training examples.");
DEFINE_int64(test_examples, 100000, "Test examples.");
DEFINE_int32(train_files, 2, "Training files (shards).");
DEFINE_uint64(seed, 1, "Seed of the planted model.");
DEFINE_uint64(data_seed, 2, "Seed of the example draws.");
DEFINE_double(target_ctr, 0.25, "Mean click rate the model is calibrated to.");
DEFINE_double(head_rank, 100,
              "Ids of rank r weigh (head_rank / (head_rank + r))^damping of "
              "the most frequent ids: where the signal sits.");
DEFINE_double(damping, 2, "See --head_rank.");
DEFINE_double(drift_fraction, 0,
              "An unbounded, drifting id stream: every --drift_examples "
              "training examples the fields of 10,000 ids or more shift by "
              "this fraction of their vocabulary -- new ids enter the tail, "
              "climb to the head and leave (planted_ctr_model.h). The test "
              "set is drawn at the last training example's generation "
              "(recent data). 0: no drift.");
DEFINE_int64(drift_examples, 100000,
             "Training examples per drift generation (--drift_fraction).");

namespace psrt {
namespace {

// One output file in the chosen format.
class ExampleWriter {
 public:
  static absl::StatusOr<std::unique_ptr<ExampleWriter>> Open(
      const std::string& path) {
    std::unique_ptr<ExampleWriter> w(new ExampleWriter());
    if (FLAGS_format == "tfrecord") {
      auto tf = TfRecordWriter::Open(path, false);
      if (!tf.ok()) return tf.status();
      w->tfrecord_ = std::move(*tf);
    } else if (FLAGS_format == "libsvm" || FLAGS_format == "criteo_tsv") {
      w->text_.open(path);
      if (!w->text_) {
        return absl::UnavailableError(absl::StrCat("cannot create ", path));
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--format=", FLAGS_format, " is not libsvm, tfrecord or criteo_tsv"));
    }
    return w;
  }

  absl::Status Write(const Example& e, const std::vector<int64_t>& counts) {
    if (tfrecord_) return tfrecord_->WriteExample(e, ReaderOptions());
    line_.clear();
    if (FLAGS_format == "libsvm") {
      absl::StrAppend(&line_, static_cast<int>(e.label));
      for (size_t i = 0; i < e.ids.size(); ++i) {
        absl::StrAppendFormat(&line_, " %d:%.6g", e.ids[i], e.values[i]);
      }
    } else {
      absl::StrAppend(&line_, static_cast<int>(e.label));
      for (int64_t c : counts) absl::StrAppend(&line_, "\t", c);
      for (int f = PlantedCtrModel::kDenseFields;
           f < static_cast<int>(e.ids.size()); ++f) {
        absl::StrAppendFormat(&line_, "\t%08x", e.ids[f]);
      }
    }
    line_.push_back('\n');
    text_ << line_;
    return text_ ? absl::OkStatus() : absl::DataLossError("write failed");
  }

  absl::Status Close() {
    if (tfrecord_) return tfrecord_->Close();
    text_.close();
    return text_ ? absl::OkStatus() : absl::DataLossError("close failed");
  }

 private:
  ExampleWriter() = default;
  std::unique_ptr<TfRecordWriter> tfrecord_;
  std::ofstream text_;
  std::string line_;
};

std::string Extension() {
  return FLAGS_format == "tfrecord" ? "tfrecords"
         : FLAGS_format == "libsvm" ? "libsvm"
                                    : "tsv";
}

int Run() {
  if (FLAGS_train_files < 1 || FLAGS_train_examples < 1 ||
      FLAGS_test_examples < 1) {
    std::cerr << "ctr_datagen: need >= 1 train file, train and test example\n";
    return 2;
  }
  std::error_code ignored;
  std::filesystem::create_directories(FLAGS_output_dir, ignored);
  if (FLAGS_drift_fraction < 0 || FLAGS_drift_fraction > 1 ||
      FLAGS_drift_examples < 1) {
    std::cerr << "ctr_datagen: --drift_fraction must be in [0, 1] and "
                 "--drift_examples >= 1\n";
    return 2;
  }
  PlantedCtrModel model(FLAGS_seed, FLAGS_target_ctr, FLAGS_head_rank,
                        FLAGS_damping);
  model.set_drift(FLAGS_drift_fraction);
  std::mt19937_64 rng(FLAGS_data_seed);
  Example e;
  std::vector<int64_t> counts;
  absl::flat_hash_set<int64_t> distinct;
  int64_t positives = 0;
  const int64_t per_file =
      (FLAGS_train_examples + FLAGS_train_files - 1) / FLAGS_train_files;
  int64_t written = 0;
  for (int f = 0; f < FLAGS_train_files; ++f) {
    const std::string path =
        absl::StrFormat("%s/train-%05d-of-%05d.%s", FLAGS_output_dir, f,
                        FLAGS_train_files, Extension());
    auto writer = ExampleWriter::Open(path);
    if (!writer.ok()) {
      std::cerr << "ctr_datagen: " << writer.status() << "\n";
      return 1;
    }
    for (int64_t i = 0; i < per_file && written < FLAGS_train_examples; ++i) {
      model.Sample(rng, &e, &counts, written / FLAGS_drift_examples);
      positives += e.label == 1.0f;
      for (size_t k = PlantedCtrModel::kDenseFields; k < e.ids.size(); ++k) {
        distinct.insert(e.ids[k]);
      }
      if (absl::Status s = (*writer)->Write(e, counts); !s.ok()) {
        std::cerr << "ctr_datagen: " << path << ": " << s << "\n";
        return 1;
      }
      if (++written % (FLAGS_train_examples / 10 + 1) == 0) {
        std::cout << "ctr_datagen: " << written << " / " << FLAGS_train_examples
                  << " training examples" << std::endl;
      }
    }
    if (absl::Status s = (*writer)->Close(); !s.ok()) {
      std::cerr << "ctr_datagen: " << path << ": " << s << "\n";
      return 1;
    }
  }
  const std::string test_path =
      absl::StrCat(FLAGS_output_dir, "/test.", Extension());
  auto test = ExampleWriter::Open(test_path);
  if (!test.ok()) {
    std::cerr << "ctr_datagen: " << test.status() << "\n";
    return 1;
  }
  std::vector<float> probabilities, labels;
  for (int64_t i = 0; i < FLAGS_test_examples; ++i) {
    probabilities.push_back(model.Sample(
        rng, &e, &counts, (FLAGS_train_examples - 1) / FLAGS_drift_examples));
    labels.push_back(e.label);
    if (absl::Status s = (*test)->Write(e, counts); !s.ok()) {
      std::cerr << "ctr_datagen: " << test_path << ": " << s << "\n";
      return 1;
    }
  }
  if (absl::Status s = (*test)->Close(); !s.ok()) {
    std::cerr << "ctr_datagen: " << s << "\n";
    return 1;
  }
  const double auc = RocAuc(probabilities, labels);
  const double logloss = LogLoss(probabilities, labels);
  const std::string summary = absl::StrFormat(
      "{\"format\": \"%s\", \"train_examples\": %d, \"test_examples\": %d, "
      "\"train_files\": %d, \"distinct_train_ids\": %d, \"positive_rate\": "
      "%.4f, "
      "\"id_space\": %d, \"drift_fraction\": %g, \"generations\": %d, "
      "\"planted_test_auc\": %.5f, \"planted_test_logloss\": %.5f}",
      FLAGS_format, FLAGS_train_examples, FLAGS_test_examples,
      FLAGS_train_files, distinct.size(),
      static_cast<double>(positives) / FLAGS_train_examples, model.id_space(),
      FLAGS_drift_fraction,
      (FLAGS_train_examples - 1) / FLAGS_drift_examples + 1, auc, logloss);
  std::ofstream(FLAGS_output_dir + "/planted.json") << summary << "\n";
  std::cout << "ctr_datagen: " << summary << std::endl;
  return 0;
}

}  // namespace
}  // namespace psrt

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "Writes CTR-shaped data from a planted click model and prints the "
      "planted model's test AUC (the best achievable).\n"
      "  ctr_datagen [--output_dir=DIR] [--format=libsvm|tfrecord|criteo_tsv]");
  psrt::HandleHelpFlag(argc, argv, "tools/ctr_datagen/");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  return psrt::Run();
}

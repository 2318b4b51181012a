// CTR data from tools/ctr_datagen's planted click model, for tests that
// compare what training reaches with the best achievable AUC.
#ifndef PSRT_TESTS_PLANTED_DATA_H_
#define PSRT_TESTS_PLANTED_DATA_H_

#include <cstdint>
#include <string>

namespace psrt {

struct PlantedData {
  std::string summary;      // planted.json
  double planted_auc = -1;  // the planted model's own test AUC
};

// Writes train-*.tfrecords and test.tfrecords (and planted.json) to `dir`;
// planted_auc -1 if ctr_datagen failed.
// `extra_flags` go to ctr_datagen as they are (e.g. "--drift_fraction=0.02").
PlantedData WritePlantedData(const std::string& dir, int64_t train_examples,
                             int64_t test_examples,
                             const std::string& extra_flags = "");

// The set in `dir` that WritePlantedData (or the :planted_1m rule) wrote;
// planted_auc -1 if it has no planted.json.
PlantedData ReadPlantedData(const std::string& dir);

// Where the :planted_1m rule of tests/BUILD put its 1M training and 100k
// test examples (relative to a test's working directory).
inline constexpr char kPlanted1mDir[] = "tests/planted_1m";

// A number from planted.json, or -1.
double PlantedNumber(const PlantedData& data, const std::string& key);

}  // namespace psrt

#endif  // PSRT_TESTS_PLANTED_DATA_H_

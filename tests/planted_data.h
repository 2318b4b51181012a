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

// A number from planted.json, or -1.
double PlantedNumber(const PlantedData& data, const std::string& key);

}  // namespace psrt

#endif  // PSRT_TESTS_PLANTED_DATA_H_

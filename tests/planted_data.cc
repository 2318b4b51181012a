#include "tests/planted_data.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace psrt {

double PlantedNumber(const PlantedData& data, const std::string& key) {
  const std::string& json = data.summary;
  const size_t at = json.find("\"" + key + "\": ");
  return at == std::string::npos ? -1
                                 : std::stod(json.substr(at + key.size() + 4));
}

PlantedData WritePlantedData(const std::string& dir, int64_t train_examples,
                             int64_t test_examples,
                             const std::string& extra_flags) {
  PlantedData data;
  const std::string datagen = absl::StrCat(
      "tools/ctr_datagen/ctr_datagen --output_dir=", dir,
      " --train_examples=", train_examples, " --test_examples=", test_examples,
      " --format=tfrecord ", extra_flags);
  if (std::system(datagen.c_str()) != 0) return data;
  return ReadPlantedData(dir);
}

PlantedData ReadPlantedData(const std::string& dir) {
  PlantedData data;
  std::ifstream in(dir + "/planted.json");
  if (!in) return data;
  std::stringstream json;
  json << in.rdbuf();
  data.summary = json.str();
  data.planted_auc = PlantedNumber(data, "planted_test_auc");
  return data;
}

}  // namespace psrt

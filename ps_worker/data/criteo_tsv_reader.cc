#include "ps_worker/data/criteo_tsv_reader.h"

#include <cmath>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "ps_worker/data/feature_hash.h"
#include "ps_worker/data/line_reader.h"

namespace psrt {
namespace {

class CriteoTsvReader final : public LineReader {
 public:
  CriteoTsvReader(std::unique_ptr<InputFile> file, const ReaderOptions& options)
      : LineReader(std::move(file), options.skip_bad_records),
        buckets_(options.criteo_buckets) {}

 protected:
  absl::Status ParseLine(const std::string& line, Example* e) const override {
    std::vector<absl::string_view> cols = absl::StrSplit(line, '\t');
    constexpr size_t kColumns =
        1 + kCriteoIntegerFields + kCriteoCategoricalFields;
    if (cols.size() != kColumns) {
      return absl::InvalidArgumentError(
          absl::StrCat("has ", cols.size(), " TAB-separated columns, want ",
                       kColumns, " (label, I1..I13, C1..C26)"));
    }
    int label;
    if (!absl::SimpleAtoi(cols[0], &label) || (label != 0 && label != 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("label '", cols[0], "' is not 0 or 1"));
    }
    e->label = static_cast<float>(label);
    for (int f = 0; f < kCriteoIntegerFields; ++f) {
      double x = 0;
      const absl::string_view c = cols[1 + f];
      if (!c.empty() && !absl::SimpleAtod(c, &x)) {
        return absl::InvalidArgumentError(
            absl::StrCat("I", f + 1, " = '", c, "' is not a number"));
      }
      e->ids.push_back(f + 1);
      e->values.push_back(static_cast<float>(std::log1p(std::max(x, 0.0))));
    }
    for (int f = 0; f < kCriteoCategoricalFields; ++f) {
      const int field = kCriteoIntegerFields + f;
      const int64_t h = HashFeature(field, cols[1 + field]);
      e->ids.push_back(buckets_ > 0 ? 14 + h % buckets_ : h);
      e->values.push_back(1.0f);
    }
    return absl::OkStatus();
  }

 private:
  const int64_t buckets_;
};

}  // namespace

std::unique_ptr<RecordReader> NewCriteoTsvReader(
    std::unique_ptr<InputFile> file, const ReaderOptions& options) {
  return std::make_unique<CriteoTsvReader>(std::move(file), options);
}

}  // namespace psrt

#include "ps_worker/data/csv_reader.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "ps_worker/data/feature_hash.h"
#include "ps_worker/data/line_reader.h"

namespace psrt {

const char kAdultCsvSchema[] =
    "age:num/0.01/buckets=18|25|30|35|40|45|50|55|60|65,"
    "workclass:cat,fnlwgt:skip,education:cat,education_num:num/0.0625,"
    "marital_status:cat,occupation:cat,relationship:cat,race:cat,sex:cat,"
    "capital_gain:num/log/buckets=1|3000|5000|7000|10000|15000,"
    "capital_loss:num/log/buckets=1|1500|2000|2500,"
    "hours_per_week:num/0.01/buckets=20|30|35|40|45|50|60,"
    "native_country:cat,income:label=>50K,"
    "cross:education+occupation,cross:native_country+occupation,"
    "cross:age+workclass,cross:sex+occupation,cross:age+education,"
    "cross:marital_status+relationship";

namespace {

struct Column {
  enum Kind { kLabel, kCat, kNum, kSkip } kind = kSkip;
  std::string name;
  std::string positive;         // kLabel
  float scale = 1;              // kNum
  bool log = false;             // kNum
  std::vector<double> buckets;  // kNum: bucket boundaries
};

struct Schema {
  std::vector<Column> columns;
  std::vector<std::pair<int, int>> crosses;
  int dense = 0;
  int sparse = 0;
};

absl::StatusOr<Schema> ParseSchema(std::string text) {
  if (text == "adult") text = kAdultCsvSchema;
  Schema schema;
  int labels = 0;
  for (absl::string_view spec : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    spec = absl::StripAsciiWhitespace(spec);
    std::vector<std::string> parts =
        absl::StrSplit(spec, absl::MaxSplits(':', 1));
    if (parts.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("csv schema: '", spec, "' is not name:kind"));
    }
    if (parts[0] == "cross") {
      std::vector<std::string> ab = absl::StrSplit(parts[1], '+');
      auto find = [&](const std::string& n) {
        for (size_t i = 0; i < schema.columns.size(); ++i) {
          if (schema.columns[i].name == n) return static_cast<int>(i);
        }
        return -1;
      };
      if (ab.size() != 2 || find(ab[0]) < 0 || find(ab[1]) < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "csv schema: cross '", parts[1], "' must name two columns: a+b"));
      }
      schema.crosses.push_back({find(ab[0]), find(ab[1])});
      ++schema.sparse;
      continue;
    }
    Column c;
    c.name = parts[0];
    std::vector<std::string> opts = absl::StrSplit(parts[1], '/');
    const std::string& kind = opts[0];
    if (absl::StartsWith(kind, "label=")) {
      c.kind = Column::kLabel;
      c.positive = kind.substr(6);
      ++labels;
    } else if (kind == "cat") {
      c.kind = Column::kCat;
      ++schema.sparse;
    } else if (kind == "skip") {
      c.kind = Column::kSkip;
    } else if (kind == "num") {
      c.kind = Column::kNum;
      ++schema.dense;
      for (size_t i = 1; i < opts.size(); ++i) {
        if (opts[i] == "log") {
          c.log = true;
        } else if (absl::StartsWith(opts[i], "buckets=")) {
          for (absl::string_view b : absl::StrSplit(opts[i].substr(8), '|')) {
            double v;
            if (!absl::SimpleAtod(b, &v)) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "csv schema: bucket boundary '", b, "' of ", c.name));
            }
            c.buckets.push_back(v);
          }
          std::sort(c.buckets.begin(), c.buckets.end());
          ++schema.sparse;
        } else if (!absl::SimpleAtof(opts[i], &c.scale)) {
          return absl::InvalidArgumentError(
              absl::StrCat("csv schema: option '", opts[i], "' of ", c.name,
                           " is not a scale, 'log' or buckets=a|b"));
        }
      }
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("csv schema: kind '", kind, "' of ", c.name,
                       " is not label=<token>, cat, num or skip"));
    }
    schema.columns.push_back(std::move(c));
  }
  if (labels != 1) {
    return absl::InvalidArgumentError(
        "csv schema: exactly one column must be the label "
        "(name:label=<token>)");
  }
  return schema;
}

class CsvReader final : public LineReader {
 public:
  CsvReader(std::unique_ptr<InputFile> file, const ReaderOptions& options,
            Schema schema)
      : LineReader(std::move(file), options.skip_bad_records, '|'),
        schema_(std::move(schema)) {}

 protected:
  absl::Status ParseLine(const std::string& line, Example* e) const override {
    std::vector<absl::string_view> cells = absl::StrSplit(line, ',');
    if (cells.size() != schema_.columns.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("has ", cells.size(), " columns, the schema has ",
                       schema_.columns.size()));
    }
    // Per thread: parsing runs on several at once (record_reader.h).
    thread_local std::vector<std::string> tokens;
    tokens.assign(cells.size(), std::string());
    for (size_t i = 0; i < cells.size(); ++i) {
      const Column& c = schema_.columns[i];
      absl::string_view cell = absl::StripAsciiWhitespace(cells[i]);
      switch (c.kind) {
        case Column::kLabel:
          absl::ConsumeSuffix(&cell, ".");
          e->label = cell == c.positive ? 1.0f : 0.0f;
          break;
        case Column::kCat:
          tokens[i] = std::string(cell);
          e->ids.push_back(HashFeature(static_cast<int64_t>(i), cell));
          e->values.push_back(1.0f);
          break;
        case Column::kNum: {
          double x = 0;
          if (cell != "?" && !absl::SimpleAtod(cell, &x)) {
            return absl::InvalidArgumentError(
                absl::StrCat(c.name, " = '", cell, "' is not a number"));
          }
          e->dense.push_back(static_cast<float>(
              c.log ? std::log1p(std::max(x, 0.0)) : x * c.scale));
          if (!c.buckets.empty()) {
            const size_t bucket =
                std::upper_bound(c.buckets.begin(), c.buckets.end(), x) -
                c.buckets.begin();
            tokens[i] = absl::StrCat("b", bucket);
            e->ids.push_back(HashFeature(static_cast<int64_t>(i), tokens[i]));
            e->values.push_back(1.0f);
          }
          break;
        }
        case Column::kSkip:
          break;
      }
    }
    for (size_t k = 0; k < schema_.crosses.size(); ++k) {
      const auto [a, b] = schema_.crosses[k];
      e->ids.push_back(HashFeature(1000 + static_cast<int64_t>(k),
                                   absl::StrCat(tokens[a], "\x1f", tokens[b])));
      e->values.push_back(1.0f);
    }
    return absl::OkStatus();
  }

 private:
  const Schema schema_;
};

}  // namespace

absl::Status DescribeCsvSchema(const std::string& schema, int* dense_features,
                               int* sparse_fields) {
  absl::StatusOr<Schema> s = ParseSchema(schema);
  if (!s.ok()) return s.status();
  *dense_features = s->dense;
  *sparse_fields = s->sparse;
  return absl::OkStatus();
}

std::unique_ptr<RecordReader> NewCsvReader(std::unique_ptr<InputFile> file,
                                           const ReaderOptions& options) {
  absl::StatusOr<Schema> schema = ParseSchema(options.csv_schema);
  if (!schema.ok()) return nullptr;  // OpenRecordReader checks first
  return std::make_unique<CsvReader>(std::move(file), options,
                                     std::move(*schema));
}

}  // namespace psrt

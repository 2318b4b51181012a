#include "ps_worker/data/tfrecord_features.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace psrt {
namespace {

// Splits "C26" into ("C", 26); false if it does not end in digits.
bool SplitNumbered(absl::string_view name, std::string* prefix, int* number) {
  size_t digits = name.size();
  while (digits > 0 && absl::ascii_isdigit(name[digits - 1])) --digits;
  if (digits == name.size() || name.size() - digits > 6) return false;
  *prefix = std::string(name.substr(0, digits));
  return absl::SimpleAtoi(name.substr(digits), number);
}

absl::Status Bad(const std::string& spec, absl::string_view part,
                 absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("--tfrecord_features='", spec, "': '", part, "' ", why,
                   " (expected e.g. categorical:C1..C26,dense:I1..I13)"));
}

}  // namespace

absl::StatusOr<TfRecordColumns> ParseTfRecordFeatures(const std::string& spec) {
  TfRecordColumns columns;
  std::vector<std::string>* group = nullptr;
  absl::flat_hash_set<std::string> seen;
  for (absl::string_view raw : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    absl::string_view part = absl::StripAsciiWhitespace(raw);
    if (const size_t colon = part.find(':'); colon != absl::string_view::npos) {
      const absl::string_view kind = part.substr(0, colon);
      if (kind == "categorical") {
        group = &columns.categorical;
      } else if (kind == "dense") {
        group = &columns.dense;
      } else {
        return Bad(spec, part, "has an unknown kind (categorical or dense)");
      }
      part = part.substr(colon + 1);
    }
    if (group == nullptr) return Bad(spec, part, "comes before any kind:");
    if (part.empty()) return Bad(spec, raw, "names no feature");
    std::vector<std::string> names;
    if (const size_t dots = part.find(".."); dots != absl::string_view::npos) {
      std::string first_prefix, last_prefix;
      int first = 0, last = 0;
      if (!SplitNumbered(part.substr(0, dots), &first_prefix, &first) ||
          !SplitNumbered(part.substr(dots + 2), &last_prefix, &last) ||
          first_prefix != last_prefix || first > last ||
          last - first >= 100000) {
        return Bad(spec, part,
                   "is not a range P<a>..P<b> (same prefix, a <= b)");
      }
      for (int i = first; i <= last; ++i) {
        names.push_back(absl::StrCat(first_prefix, i));
      }
    } else {
      names.emplace_back(part);
    }
    for (std::string& name : names) {
      if (!seen.insert(name).second) return Bad(spec, name, "appears twice");
      group->push_back(std::move(name));
    }
  }
  if (columns.empty()) return Bad(spec, spec, "names no feature");
  return columns;
}

}  // namespace psrt

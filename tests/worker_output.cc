#include "tests/worker_output.h"

#include <cstdlib>

namespace psrt {

std::vector<double> MetricValues(const std::string& output,
                                 const std::string& key) {
  std::vector<double> values;
  const std::string needle = key + "=";
  for (size_t at = output.find(needle); at != std::string::npos;
       at = output.find(needle, at + 1)) {
    if (at > 0 && output[at - 1] != ' ' && output[at - 1] != '\n' &&
        output[at - 1] != ']') {
      continue;  // part of a longer key
    }
    const char* start = output.c_str() + at + needle.size();
    char* end;
    const double v = std::strtod(start, &end);
    if (end != start) values.push_back(v);
  }
  return values;
}

double LastMetric(const std::string& output, const std::string& key) {
  std::vector<double> v = MetricValues(output, key);
  return v.empty() ? -1 : v.back();
}

}  // namespace psrt

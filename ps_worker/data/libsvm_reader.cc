#include "ps_worker/data/libsvm_reader.h"

#include <cstdlib>
#include <cstring>

#include "ps_worker/data/line_reader.h"

namespace psrt {
namespace {

class LibsvmReader final : public LineReader {
 public:
  using LineReader::LineReader;

 protected:
  absl::Status ParseLine(const std::string& line, Example* e) const override {
    const char* p = line.c_str();
    char* end;
    e->label = std::strtof(p, &end);
    if (end == p) {
      return absl::InvalidArgumentError(
          absl::StrCat("label is not a number: '", line.substr(0, 40), "'"));
    }
    if (e->label == -1.0f) e->label = 0.0f;
    p = end;
    while (true) {
      while (*p == ' ' || *p == '\t') ++p;
      if (*p == '\0') break;
      const char* term = p;
      // id:value or field:id:value
      long long first = std::strtoll(p, &end, 10);
      if (end == p || *end != ':') return BadTerm(term);
      p = end + 1;
      long long id = std::strtoll(p, &end, 10);
      if (end == p) return BadTerm(term);
      if (*end == ':') {  // LibFFM: first was the field
        p = end + 1;
      } else {
        id = first;
        p = term + (std::strchr(term, ':') - term) + 1;
      }
      const float value = std::strtof(p, &end);
      if (end == p || (*end != '\0' && *end != ' ' && *end != '\t')) {
        return BadTerm(term);
      }
      p = end;
      if (id < 0) return BadTerm(term);
      e->ids.push_back(id);
      e->values.push_back(value);
    }
    return absl::OkStatus();
  }

 private:
  static absl::Status BadTerm(const char* term) {
    const char* stop = term;
    while (*stop != '\0' && *stop != ' ' && *stop != '\t') ++stop;
    return absl::InvalidArgumentError(
        absl::StrCat("bad feature '", std::string(term, stop - term),
                     "' (want id:value with id >= 0, or field:id:value)"));
  }
};

}  // namespace

std::unique_ptr<RecordReader> NewLibsvmReader(std::unique_ptr<InputFile> file,
                                              const ReaderOptions& options) {
  return std::make_unique<LibsvmReader>(std::move(file),
                                        options.skip_bad_records, '#');
}

}  // namespace psrt

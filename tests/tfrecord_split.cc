#include "tests/tfrecord_split.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace psrt {

absl::Status SplitTfRecords(const std::string& path, int64_t head_records,
                            const std::string& head_path,
                            const std::string& tail_path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string data = buffer.str();
  size_t pos = 0;
  for (int64_t r = 0; r < head_records; ++r) {
    // u64 length, u32 CRC of the length, the record, u32 CRC of the record.
    if (pos + 12 > data.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " has only ", r, " records"));
    }
    uint64_t length;
    std::memcpy(&length, data.data() + pos, 8);
    if (length > data.size() - pos - 16) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": record ", r, " runs past the end"));
    }
    pos += 16 + length;
  }
  std::ofstream(head_path, std::ios::binary) << data.substr(0, pos);
  std::ofstream(tail_path, std::ios::binary) << data.substr(pos);
  return absl::OkStatus();
}

}  // namespace psrt

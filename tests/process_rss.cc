#include "tests/process_rss.h"

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace psrt {

int64_t RssBytes(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") {
      int64_t kb;
      status >> kb;
      return kb * 1024;
    }
    std::string rest;
    std::getline(status, rest);
  }
  return -1;
}

}  // namespace psrt

#include "tests/process_rss.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace psrt {

namespace {
// A "Vm...:" line of /proc/PID/status, in bytes; -1 if absent.
int64_t StatusBytes(pid_t pid, const std::string& field) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string key;
  while (status >> key) {
    if (key == field) {
      int64_t kb;
      status >> kb;
      return kb * 1024;
    }
    std::string rest;
    std::getline(status, rest);
  }
  return -1;
}
}  // namespace

int64_t RssBytes(pid_t pid) { return StatusBytes(pid, "VmRSS:"); }

int64_t PeakRssBytes(pid_t pid) { return StatusBytes(pid, "VmHWM:"); }

void ResetPeakRss() { std::ofstream("/proc/self/clear_refs") << "5"; }

double CpuSeconds(pid_t pid) {
  std::ifstream file(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(file)),
                   std::istreambuf_iterator<char>());
  // The command (field 2) may hold spaces: fields are counted after ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  double utime = -1, stime = -1;
  // Fields 3.. follow; utime and stime are fields 14 and 15.
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  if (utime < 0 || stime < 0) return -1;
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace psrt

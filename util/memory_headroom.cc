#include "util/memory_headroom.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace psrt {
namespace {

// Limits at or above this are "no limit" (cgroup v1 writes 2^63 rounded
// down to a page).
constexpr int64_t kUnlimited = int64_t{1} << 60;

bool ReadFile(const std::string& path, std::string* text) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream buffer;
  buffer << in.rdbuf();
  *text = buffer.str();
  return true;
}

// A file holding one number; "max" (cgroup v2) reads as kUnlimited.
bool ReadNumber(const std::string& path, int64_t* value) {
  std::string text;
  if (!ReadFile(path, &text)) return false;
  absl::string_view trimmed = absl::StripAsciiWhitespace(text);
  if (trimmed == "max") {
    *value = kUnlimited;
    return true;
  }
  return absl::SimpleAtoi(trimmed, value);
}

// The value of `key` in a "key value" per line file (memory.stat), or 0.
int64_t StatValue(const std::string& path, absl::string_view key) {
  std::string text;
  if (!ReadFile(path, &text)) return 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<absl::string_view> parts =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t value = 0;
    if (parts.size() == 2 && parts[0] == key &&
        absl::SimpleAtoi(parts[1], &value)) {
      return value;
    }
  }
  return 0;
}

// A "Key:" of <proc>/meminfo in bytes, or 0.
int64_t MemInfo(const std::string& proc, absl::string_view wanted) {
  std::ifstream meminfo(proc + "/meminfo");
  std::string key, unit;
  int64_t kb = 0;
  while (meminfo >> key >> kb >> unit) {
    if (key == wanted) return kb * 1024;
  }
  return 0;
}

// The file names of one cgroup version's memory controller.
struct ControllerFiles {
  const char* version;
  const char* limit;
  const char* usage;
  const char* inactive_file;  // key in memory.stat
};
constexpr ControllerFiles kV1 = {"v1", "memory.limit_in_bytes",
                                 "memory.usage_in_bytes",
                                 "total_inactive_file"};
constexpr ControllerFiles kV2 = {"v2", "memory.max", "memory.current",
                                 "inactive_file"};

// Lowers `headroom` to the limit of each cgroup from `mount`+`path` up to
// `mount`. When the process's path is not under the mount (a container
// with its own cgroup namespace sees its cgroup as the mount's root), the
// mount's root alone is read.
void ApplyLimits(const std::string& mount, std::string path,
                 const ControllerFiles& files, MemoryHeadroom* headroom) {
  std::ifstream probe(absl::StrCat(mount, path, "/", files.limit));
  if (!probe) path = "";
  while (true) {
    const std::string dir = mount + path;
    int64_t limit = 0, usage = 0;
    if (ReadNumber(absl::StrCat(dir, "/", files.limit), &limit) &&
        limit < kUnlimited &&
        ReadNumber(absl::StrCat(dir, "/", files.usage), &usage)) {
      const int64_t working_set =
          usage - StatValue(dir + "/memory.stat", files.inactive_file);
      const int64_t room = std::max<int64_t>(0, limit - working_set);
      if (headroom->bytes < 0 || room < headroom->bytes) {
        headroom->bytes = room;
        headroom->total = limit;
        headroom->source = absl::StrCat(
            "the memory limit of cgroup ", path.empty() ? "/" : path, " (",
            files.version, " ", files.limit, "=", limit, ", ", working_set,
            " bytes in use)");
      }
    }
    if (path.empty() || path == "/") break;
    const size_t slash = path.rfind('/');
    path = slash == std::string::npos ? "" : path.substr(0, slash);
  }
}

}  // namespace

MemoryHeadroom AvailableMemory(const MemoryFiles& files) {
  MemoryHeadroom headroom;
  if (const int64_t host = MemInfo(files.proc, "MemAvailable:"); host > 0) {
    headroom.bytes = host;
    headroom.total = MemInfo(files.proc, "MemTotal:");
    headroom.source = "MemAvailable of the host";
  }
  std::string cgroups;
  if (!ReadFile(files.proc + "/self/cgroup", &cgroups)) return headroom;
  for (absl::string_view line : absl::StrSplit(cgroups, '\n')) {
    // "<id>:<controllers>:<path>"; v2's single hierarchy is "0::<path>".
    std::vector<std::string> parts =
        absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    std::string path = parts[2] == "/" ? "" : parts[2];
    if (parts[0] == "0" && parts[1].empty()) {
      // Pure v2 mounts the hierarchy at the root, hybrid at unified/.
      std::ifstream pure(files.cgroup + "/cgroup.controllers");
      ApplyLimits(pure ? files.cgroup : files.cgroup + "/unified", path, kV2,
                  &headroom);
      continue;
    }
    for (absl::string_view controller : absl::StrSplit(parts[1], ',')) {
      if (controller == "memory") {
        ApplyLimits(files.cgroup + "/memory", path, kV1, &headroom);
      }
    }
  }
  return headroom;
}

}  // namespace psrt

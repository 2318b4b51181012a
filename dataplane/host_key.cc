#include "dataplane/host_key.h"

#include <unistd.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace psrt::dataplane {

std::string SharedMemoryHostKey() {
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string key;
  if (!std::getline(boot, key) || key.empty()) return "";
  for (const char* ns : {"ipc", "pid", "mnt", "net"}) {
    char link[256];
    const ssize_t n = readlink(absl::StrCat("/proc/self/ns/", ns).c_str(), link,
                               sizeof(link));
    if (n <= 0) return "";
    absl::StrAppend(&key, "|", absl::string_view(link, n));
  }
  return key;
}

}  // namespace psrt::dataplane

#include "dataplane/shm_regions.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace psrt::dataplane {
namespace {

constexpr char kShmDirectory[] = "/dev/shm";

}  // namespace

int RemoveStaleShmRegions(pid_t pid) {
  DIR* dir = opendir(kShmDirectory);
  if (dir == nullptr) return 0;
  const std::string prefix = absl::StrCat(pid, ":", getuid(), ":");
  int removed = 0;
  while (dirent* entry = readdir(dir)) {
    if (!absl::StartsWith(entry->d_name, prefix)) continue;
    const int fd = openat(dirfd(dir), entry->d_name,
                          O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) continue;
    // Held by a live endpoint: its owner's, not stale.
    if (flock(fd, LOCK_EX | LOCK_NB) == 0 &&
        unlinkat(dirfd(dir), entry->d_name, 0) == 0) {
      ++removed;
    }
    close(fd);
  }
  closedir(dir);
  return removed;
}

int HoldShmRegion(absl::string_view fabric_address) {
  absl::string_view name = fabric_address;
  absl::ConsumePrefix(&name, "fi_shm://");
  absl::ConsumeSuffix(&name, absl::string_view("\0", 1));
  if (name.empty() || absl::StrContains(name, '/')) return -1;
  const std::string path = absl::StrCat(kShmDirectory, "/", name);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return -1;
  if (flock(fd, LOCK_SH | LOCK_NB) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace psrt::dataplane

// The default --ssd_tier_dir: a directory of this process's own under a
// root shared by the PS on the machine ($TMPDIR/psrt-ssd-tier/ps<task>-
// <pid>), so that PS started side by side never share a store.
//
// A PS killed with SIGKILL cannot remove its directory, and its spilled
// rows (as large as its tables allow) would stay on the disk for good. So
// each PS holds an exclusive flock(2) on <dir>/.owner-lock while it lives
// (the kernel releases it when the process dies, however it dies), and
// every PS that starts removes the directories under the root whose lock
// it can take: their owner is gone. The lock, not the pid in the name,
// decides: a pid may be reused, or belong to another pid namespace that
// shares the directory.
#ifndef PSRT_PS_SERVER_SHARDS_SSD_TIER_DIR_H_
#define PSRT_PS_SERVER_SHARDS_SSD_TIER_DIR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace psrt {

class OwnedSsdTierDir {
 public:
  // $TMPDIR (or /tmp) + "/psrt-ssd-tier".
  static std::string DefaultRoot();

  // <root>/ps<task>-<this process's pid>.
  static std::string PathFor(const std::string& root, int task);

  // Removes the directories under `root` left by dead PS, then creates
  // PathFor(root, task) and locks it for this process.
  static absl::StatusOr<std::unique_ptr<OwnedSsdTierDir>> Create(
      const std::string& root, int task);

  // Removes the directory (the stores in it are closed by then).
  ~OwnedSsdTierDir();

  const std::string& path() const { return path_; }

 private:
  OwnedSsdTierDir(std::string path, int lock_fd)
      : path_(std::move(path)), lock_fd_(lock_fd) {}
  const std::string path_;
  const int lock_fd_;
};

// Removes each directory directly under `root` holding a .owner-lock that
// no process holds; returns how many. Directories without one (being
// created, or not a PS's) are left.
int RemoveDeadOwnersSsdTierDirs(const std::string& root);

}  // namespace psrt

#endif  // PSRT_PS_SERVER_SHARDS_SSD_TIER_DIR_H_

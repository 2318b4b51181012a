#include "ps_server/shards/ssd_tier_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace psrt {
namespace {

constexpr char kLockName[] = ".owner-lock";

}  // namespace

std::string OwnedSsdTierDir::DefaultRoot() {
  const char* tmp = std::getenv("TMPDIR");
  return absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp",
                      "/psrt-ssd-tier");
}

std::string OwnedSsdTierDir::PathFor(const std::string& root, int task) {
  return absl::StrCat(root, "/ps", task, "-", getpid());
}

int RemoveDeadOwnersSsdTierDirs(const std::string& root) {
  std::error_code error;
  int removed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(root, error)) {
    std::error_code entry_error;
    if (!entry.is_directory(entry_error) || entry.is_symlink(entry_error)) {
      continue;
    }
    const std::string lock = (entry.path() / kLockName).string();
    const int fd = open(lock.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;  // not (yet) a PS's
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      const std::uintmax_t gone =
          std::filesystem::remove_all(entry.path(), entry_error);
      if (entry_error) {
        LOG(WARNING) << "SSD tier: cannot remove " << entry.path()
                     << ", left by a PS that is gone: "
                     << entry_error.message();
      } else {
        LOG(INFO) << "SSD tier: removed " << entry.path() << " (" << gone
                  << " files), left by a PS that is gone";
        ++removed;
      }
    }
    close(fd);
  }
  return removed;
}

absl::StatusOr<std::unique_ptr<OwnedSsdTierDir>> OwnedSsdTierDir::Create(
    const std::string& root, int task) {
  RemoveDeadOwnersSsdTierDirs(root);
  const std::string path = PathFor(root, task);
  std::error_code error;
  std::filesystem::create_directories(path, error);
  if (error) {
    return absl::FailedPreconditionError(absl::StrCat(
        "SSD tier: cannot create ", path, ": ", error.message(),
        " (set --ssd_tier_dir, or TMPDIR, to a writable directory)"));
  }
  // Locked under another name first: a PS sweeping meanwhile never finds
  // the lock free.
  const std::string lock = absl::StrCat(path, "/", kLockName);
  const std::string unnamed = lock + ".new";
  const int fd =
      open(unnamed.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) != 0 ||
      rename(unnamed.c_str(), lock.c_str()) != 0) {
    const int e = errno;
    if (fd >= 0) close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("SSD tier: cannot lock ", lock, ": ", std::strerror(e)));
  }
  return std::unique_ptr<OwnedSsdTierDir>(new OwnedSsdTierDir(path, fd));
}

OwnedSsdTierDir::~OwnedSsdTierDir() {
  std::error_code error;
  std::filesystem::remove_all(path_, error);
  if (error) {
    LOG(WARNING) << "SSD tier: cannot remove " << path_ << ": "
                 << error.message();
  }
  close(lock_fd_);
}

}  // namespace psrt

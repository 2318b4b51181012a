#include "ps_server/storage/file_storage.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace psrt {
namespace {

absl::Status Errno(absl::string_view what, const std::string& path) {
  const int err = errno;
  const std::string message =
      absl::StrCat(what, " ", path, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status MakeDirs(const std::string& dir) {
  if (dir.empty()) return absl::OkStatus();
  std::string path;
  for (absl::string_view part : absl::StrSplit(dir, '/')) {
    if (path.empty() && part.empty()) {
      path = "/";
      continue;
    }
    if (part.empty()) continue;
    absl::StrAppend(&path, path.empty() || path.back() == '/' ? "" : "/", part);
    if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
      return Errno("cannot create directory", path);
    }
  }
  return absl::OkStatus();
}

absl::Status FsyncDir(const std::string& dir) {
  const int fd = open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return Errno("cannot open directory", dir);
  const int rc = fsync(fd);
  const absl::Status status =
      rc == 0 ? absl::OkStatus() : Errno("fsync of directory", dir);
  close(fd);
  return status;
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

class FileStorage final : public Storage {
 public:
  explicit FileStorage(std::string root) : root_(std::move(root)) {
    while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
  }

  absl::Status Write(absl::string_view key, absl::string_view data) override {
    const std::string path = Path(key);
    const std::string dir = DirName(path);
    if (absl::Status s = MakeDirs(dir); !s.ok()) return s;
    static std::atomic<uint64_t> counter{0};
    const std::string temp =
        absl::StrCat(path, ".tmp-", getpid(), "-", counter.fetch_add(1));
    const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return Errno("cannot create", temp);
    absl::Status status;
    size_t done = 0;
    while (done < data.size()) {
      const size_t chunk = std::min<size_t>(data.size() - done, 64 << 20);
      const ssize_t n = write(fd, data.data() + done, chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        status = Errno("write to", temp);
        break;
      }
      done += static_cast<size_t>(n);
    }
    if (status.ok() && fsync(fd) != 0) status = Errno("fsync of", temp);
    // close() can be where NFS reports a failed write.
    if (close(fd) != 0 && status.ok()) status = Errno("close of", temp);
    if (status.ok() && rename(temp.c_str(), path.c_str()) != 0) {
      status = Errno(absl::StrCat("rename to ", path, " of"), temp);
    }
    if (!status.ok()) {
      unlink(temp.c_str());
      return status;
    }
    return FsyncDir(dir);
  }

  absl::StatusOr<std::string> Read(absl::string_view key) override {
    const std::string path = Path(key);
    const int fd = open(path.c_str(), O_RDONLY);
    if (fd < 0) return Errno("cannot open", path);
    std::string data;
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_size > 0) data.reserve(st.st_size);
    char buffer[1 << 16];
    absl::Status status;
    while (true) {
      const ssize_t n = read(fd, buffer, sizeof(buffer));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        status = Errno("read of", path);
        break;
      }
      if (n == 0) break;
      data.append(buffer, n);
    }
    close(fd);
    if (!status.ok()) return status;
    return data;
  }

  absl::StatusOr<std::vector<StorageObject>> List(
      absl::string_view prefix) override {
    std::vector<StorageObject> out;
    // Walk from the deepest directory the prefix names.
    const std::string prefix_str(prefix);
    const size_t slash = prefix_str.rfind('/');
    const std::string start =
        slash == std::string::npos ? "" : prefix_str.substr(0, slash);
    if (absl::Status s = Walk(start, prefix_str, &out); !s.ok()) return s;
    std::sort(out.begin(), out.end(),
              [](const StorageObject& a, const StorageObject& b) {
                return a.key < b.key;
              });
    return out;
  }

  absl::Status Delete(absl::string_view key) override {
    const std::string path = Path(key);
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      return Errno("cannot delete", path);
    }
    // Remove directories left empty, up to the root.
    std::string dir = DirName(path);
    while (dir.size() > root_.size() && rmdir(dir.c_str()) == 0) {
      dir = DirName(dir);
    }
    return absl::OkStatus();
  }

  std::string Describe(absl::string_view key) const override {
    return key.empty() ? root_ : Path(key);
  }

 private:
  std::string Path(absl::string_view key) const {
    return absl::StrCat(root_, "/", key);
  }

  // Adds the regular files under directory `rel` (relative to the root)
  // whose keys start with `prefix`; temporary files are skipped.
  absl::Status Walk(const std::string& rel, const std::string& prefix,
                    std::vector<StorageObject>* out) {
    const std::string dir = rel.empty() ? root_ : Path(rel);
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) {
      if (errno == ENOENT || errno == ENOTDIR) return absl::OkStatus();
      return Errno("cannot list", dir);
    }
    absl::Status status;
    while (struct dirent* entry = readdir(d)) {
      const std::string name = entry->d_name;
      if (name == "." || name == "..") continue;
      const std::string key = rel.empty() ? name : absl::StrCat(rel, "/", name);
      struct stat st;
      if (stat(Path(key).c_str(), &st) != 0) continue;  // raced with delete
      if (S_ISDIR(st.st_mode)) {
        const std::string as_dir = key + "/";
        if (absl::StartsWith(as_dir, prefix) ||
            absl::StartsWith(prefix, as_dir)) {
          status = Walk(key, prefix, out);
          if (!status.ok()) break;
        }
      } else if (S_ISREG(st.st_mode) && absl::StartsWith(key, prefix) &&
                 name.find(".tmp-") == std::string::npos) {
        out->push_back({key, static_cast<int64_t>(st.st_size)});
      }
    }
    closedir(d);
    return status;
  }

  std::string root_;
};

}  // namespace

std::unique_ptr<Storage> NewFileStorage(std::string root) {
  return std::make_unique<FileStorage>(std::move(root));
}

}  // namespace psrt

#include "storage/file_storage.h"

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

// Writes to a temporary name next to the target; Close() fsyncs, closes
// (where NFS may report a failed write), renames over the target and
// fsyncs the directory.
class FileWriter final : public StorageWriter {
 public:
  FileWriter(int fd, std::string temp, std::string path, std::string dir)
      : fd_(fd),
        temp_(std::move(temp)),
        path_(std::move(path)),
        dir_(std::move(dir)) {}
  ~FileWriter() override {
    if (fd_ >= 0) close(fd_);
    if (!closed_) unlink(temp_.c_str());
  }

  absl::Status Append(absl::string_view data) override {
    if (fd_ < 0) return absl::FailedPreconditionError("writer is closed");
    size_t done = 0;
    while (done < data.size()) {
      const size_t chunk = std::min<size_t>(data.size() - done, 64 << 20);
      const ssize_t n = write(fd_, data.data() + done, chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Errno("write to", temp_);
      done += static_cast<size_t>(n);
      written_ += n;
    }
    // Start writeback of every full 8 MiB as it is written, in this thread,
    // and wait for the range before it: dirty pages stay bounded and the
    // final fsync has little left, instead of one burst of kernel
    // writeback competing with the threads serving training.
    while (written_ - synced_ >= kSyncBytes) {
      sync_file_range(fd_, synced_, kSyncBytes, SYNC_FILE_RANGE_WRITE);
      if (synced_ >= kSyncBytes) {
        sync_file_range(fd_, synced_ - kSyncBytes, kSyncBytes,
                        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                            SYNC_FILE_RANGE_WAIT_AFTER);
      }
      synced_ += kSyncBytes;
    }
    return absl::OkStatus();
  }

  absl::Status Close() override {
    if (fd_ < 0) return absl::FailedPreconditionError("writer is closed");
    absl::Status status;
    if (fsync(fd_) != 0) status = Errno("fsync of", temp_);
    if (close(fd_) != 0 && status.ok()) status = Errno("close of", temp_);
    fd_ = -1;
    if (status.ok() && rename(temp_.c_str(), path_.c_str()) != 0) {
      status = Errno(absl::StrCat("rename to ", path_, " of"), temp_);
    }
    if (!status.ok()) return status;
    closed_ = true;
    return FsyncDir(dir_);
  }

 private:
  static constexpr off64_t kSyncBytes = 8 << 20;
  int fd_;
  const std::string temp_, path_, dir_;
  off64_t written_ = 0;
  off64_t synced_ = 0;
  bool closed_ = false;
};

// Ranges of one file, read with pread.
class FileReader final : public StorageReader {
 public:
  FileReader(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~FileReader() override { close(fd_); }

  absl::Status ReadAt(int64_t offset, int64_t length,
                      std::string* out) override {
    if (offset < 0 || length < 0) {
      return absl::InvalidArgumentError("negative read range");
    }
    out->resize(length);
    int64_t done = 0;
    while (done < length) {
      const ssize_t n =
          pread(fd_, out->data() + done, length - done, offset + done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Errno("read of", path_);
      if (n == 0) break;  // end of file
      done += n;
    }
    out->resize(done);
    return absl::OkStatus();
  }

 private:
  const int fd_;
  const std::string path_;
};

class FileStorage final : public Storage {
 public:
  explicit FileStorage(std::string root) : root_(std::move(root)) {
    while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
  }

  absl::StatusOr<std::unique_ptr<StorageWriter>> NewWriter(
      absl::string_view key) override {
    if (absl::Status s = CheckStorageKey(key); !s.ok()) return s;
    const std::string path = Path(key);
    const std::string dir = DirName(path);
    if (absl::Status s = MakeDirs(dir); !s.ok()) return s;
    static std::atomic<uint64_t> counter{0};
    std::string temp =
        absl::StrCat(path, ".tmp-", getpid(), "-", counter.fetch_add(1));
    const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return Errno("cannot create", temp);
    return std::unique_ptr<StorageWriter>(
        new FileWriter(fd, std::move(temp), path, dir));
  }

  absl::StatusOr<std::string> Read(absl::string_view key) override {
    if (absl::Status s = CheckStorageKey(key); !s.ok()) return s;
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

  absl::StatusOr<std::unique_ptr<StorageReader>> NewReader(
      absl::string_view key) override {
    if (absl::Status s = CheckStorageKey(key); !s.ok()) return s;
    const std::string path = Path(key);
    const int fd = open(path.c_str(), O_RDONLY);
    if (fd < 0) return Errno("cannot open", path);
    return std::unique_ptr<StorageReader>(new FileReader(fd, path));
  }

  absl::StatusOr<std::vector<StorageObject>> List(
      absl::string_view prefix) override {
    if (absl::Status s = CheckStorageKey(prefix, /*prefix=*/true); !s.ok()) {
      return s;
    }
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
    if (absl::Status s = CheckStorageKey(key); !s.ok()) return s;
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

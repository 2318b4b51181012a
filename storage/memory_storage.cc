#include "storage/memory_storage.h"

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace psrt {

std::map<std::string, std::string> MemoryObjects::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return objects_;
}

void MemoryObjects::Put(const std::string& path, std::string data) {
  absl::MutexLock lock(&mu_);
  objects_[path] = std::move(data);
}

void MemoryObjects::Erase(const std::string& path) {
  absl::MutexLock lock(&mu_);
  objects_.erase(path);
}

class MemoryStorage final : public Storage {
 public:
  MemoryStorage(std::shared_ptr<MemoryObjects> objects, std::string root)
      : objects_(std::move(objects)), root_(std::move(root)) {}

  absl::StatusOr<std::unique_ptr<StorageWriter>> NewWriter(
      absl::string_view key) override {
    if (absl::Status s = CheckStorageKey(key); !s.ok()) return s;
    return std::unique_ptr<StorageWriter>(
        new Writer(objects_, Path(key)));  // visible on Close only
  }

  absl::StatusOr<std::string> Read(absl::string_view key) override {
    if (absl::Status s = CheckStorageKey(key); !s.ok()) return s;
    absl::MutexLock lock(&objects_->mu_);
    auto it = objects_->objects_.find(Path(key));
    if (it == objects_->objects_.end()) {
      return absl::NotFoundError(absl::StrCat(Describe(key), " not found"));
    }
    return it->second;
  }

  absl::StatusOr<std::vector<StorageObject>> List(
      absl::string_view prefix) override {
    if (absl::Status s = CheckStorageKey(prefix, /*prefix=*/true); !s.ok()) {
      return s;
    }
    const std::string full = Path(prefix);
    std::vector<StorageObject> out;
    absl::MutexLock lock(&objects_->mu_);
    for (auto it = objects_->objects_.lower_bound(full);
         it != objects_->objects_.end() && absl::StartsWith(it->first, full);
         ++it) {
      out.push_back({it->first.substr(root_.size() + 1),
                     static_cast<int64_t>(it->second.size())});
    }
    return out;
  }

  absl::Status Delete(absl::string_view key) override {
    if (absl::Status s = CheckStorageKey(key); !s.ok()) return s;
    objects_->Erase(Path(key));
    return absl::OkStatus();
  }

  std::string Describe(absl::string_view key) const override {
    return key.empty() ? absl::StrCat("mem://", root_)
                       : absl::StrCat("mem://", root_, "/", key);
  }

 private:
  class Writer final : public StorageWriter {
   public:
    Writer(std::shared_ptr<MemoryObjects> objects, std::string path)
        : objects_(std::move(objects)), path_(std::move(path)) {}
    absl::Status Append(absl::string_view data) override {
      if (closed_) return absl::FailedPreconditionError("writer closed");
      data_.append(data.data(), data.size());
      return absl::OkStatus();
    }
    absl::Status Close() override {
      if (closed_) return absl::FailedPreconditionError("writer closed");
      closed_ = true;
      objects_->Put(path_, std::move(data_));
      return absl::OkStatus();
    }

   private:
    std::shared_ptr<MemoryObjects> objects_;
    std::string path_;
    std::string data_;
    bool closed_ = false;
  };

  std::string Path(absl::string_view key) const {
    return absl::StrCat(root_, "/", key);
  }

  const std::shared_ptr<MemoryObjects> objects_;
  const std::string root_;  // no leading or trailing '/'
};

StorageOpener MemoryStorageOpener(std::shared_ptr<MemoryObjects> objects) {
  return
      [objects](
          absl::string_view uri) -> absl::StatusOr<std::unique_ptr<Storage>> {
        absl::string_view root = uri;
        if (!absl::ConsumePrefix(&root, "mem://")) {
          return absl::InvalidArgumentError(
              absl::StrCat("'", uri, "' is not a mem:// URI"));
        }
        while (absl::ConsumeSuffix(&root, "/")) {
        }
        if (absl::Status s = CheckStorageKey(root); !s.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat("mem:// root '", root, "': ", s.message()));
        }
        return std::unique_ptr<Storage>(
            new MemoryStorage(objects, std::string(root)));
      };
}

}  // namespace psrt

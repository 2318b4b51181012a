// Storage in memory, for tests of everything that reads and writes
// checkpoints (as LevelDB's helpers/memenv is for its Env): a
// MemoryObjects space shared by every Storage its opener opens, so that a
// checkpoint written through one URI is read back through another, and a
// test can look at, corrupt or delete the bytes behind them.
//
// URIs are "mem://<path>"; the path's '/'-separated prefix is the storage
// root. Keys are checked with CheckStorageKey like every Storage's.
#ifndef PSRT_STORAGE_MEMORY_STORAGE_H_
#define PSRT_STORAGE_MEMORY_STORAGE_H_

#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "storage/storage.h"

namespace psrt {

// Objects by full path ("<root>/<key>"), shared by the storages over them.
class MemoryObjects {
 public:
  // Every object, by full path.
  std::map<std::string, std::string> Snapshot() const ABSL_LOCKS_EXCLUDED(mu_);
  // Creates or replaces the object at `path`; Erase removes it.
  void Put(const std::string& path, std::string data) ABSL_LOCKS_EXCLUDED(mu_);
  void Erase(const std::string& path) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class MemoryStorage;
  mutable absl::Mutex mu_;
  std::map<std::string, std::string> objects_ ABSL_GUARDED_BY(mu_);
};

// Opens "mem://<path>" over `objects`; INVALID_ARGUMENT for other URIs.
StorageOpener MemoryStorageOpener(std::shared_ptr<MemoryObjects> objects);

}  // namespace psrt

#endif  // PSRT_STORAGE_MEMORY_STORAGE_H_

// Storage on a local or shared file system (EFS, NFS). Writes go to a
// temporary name in the target directory, are fsynced, renamed over the
// target, and the directory is fsynced; every write, fsync and close result
// is checked, since NFS reports errors late (often only at close).
#ifndef PSRT_STORAGE_FILE_STORAGE_H_
#define PSRT_STORAGE_FILE_STORAGE_H_

#include <memory>
#include <string>

#include "storage/storage.h"

namespace psrt {

// `root` is an absolute or relative directory path (created on first write).
std::unique_ptr<Storage> NewFileStorage(std::string root);

}  // namespace psrt

#endif  // PSRT_STORAGE_FILE_STORAGE_H_

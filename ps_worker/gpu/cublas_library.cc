#include "ps_worker/gpu/cublas_library.h"

#ifdef PSRT_HAVE_CUDA

#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace psrt {
namespace gpu {
namespace {

template <typename F>
bool Resolve(void* handle, const char* name, F* f) {
  *f = reinterpret_cast<F>(dlsym(handle, name));
  return *f != nullptr;
}

absl::StatusOr<CublasLibrary> Load() {
  std::vector<std::string> candidates = {"libcublas.so.13", "libcublas.so"};
  const char* cuda = std::getenv("PSRT_CUDA_PATH");
  candidates.push_back(absl::StrCat(cuda != nullptr ? cuda : "/usr/local/cuda",
                                    "/lib64/libcublas.so.13"));
  std::vector<std::string> errors;
  for (const std::string& path : candidates) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      errors.push_back(dlerror());
      continue;
    }
    CublasLibrary lib;
    lib.path = path;
    if (Resolve(handle, "cublasCreate_v2", &lib.create) &&
        Resolve(handle, "cublasDestroy_v2", &lib.destroy) &&
        Resolve(handle, "cublasSetStream_v2", &lib.set_stream) &&
        Resolve(handle, "cublasSgemm_v2", &lib.sgemm) &&
        Resolve(handle, "cublasSgemv_v2", &lib.sgemv)) {
      return lib;  // stays loaded for the process's life
    }
    errors.push_back(absl::StrCat(path, ": missing cuBLAS v2 functions"));
    dlclose(handle);
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "cannot load cuBLAS 13 (install the CUDA toolkit or add the directory "
      "of libcublas.so.13 to LD_LIBRARY_PATH): ",
      absl::StrJoin(errors, "; ")));
}

}  // namespace

absl::StatusOr<const CublasLibrary*> LoadCublas() {
  static const absl::StatusOr<CublasLibrary>* const loaded =
      new absl::StatusOr<CublasLibrary>(Load());
  if (!loaded->ok()) return loaded->status();
  return &**loaded;
}

}  // namespace gpu
}  // namespace psrt

#endif  // PSRT_HAVE_CUDA

// cuBLAS, loaded at run time (dlopen) when a GPU tower is first made: a
// CPU-only run of ps_worker never needs the library, and a GPU host may
// supply it from the CUDA toolkit or from PyTorch's wheels
// (LD_LIBRARY_PATH), whichever is installed.
#ifndef PSRT_PS_WORKER_GPU_CUBLAS_LIBRARY_H_
#define PSRT_PS_WORKER_GPU_CUBLAS_LIBRARY_H_

#ifdef PSRT_HAVE_CUDA
#include <cublas_api.h>

#include <string>

#include "absl/status/statusor.h"

namespace psrt {
namespace gpu {

struct CublasLibrary {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  decltype(&cublasSgemv_v2) sgemv = nullptr;
  std::string path;  // the file loaded
};

// The process-wide library, loaded on first use; an error lists the files
// tried and what dlopen said.
absl::StatusOr<const CublasLibrary*> LoadCublas();

}  // namespace gpu
}  // namespace psrt

#endif  // PSRT_HAVE_CUDA

#endif  // PSRT_PS_WORKER_GPU_CUBLAS_LIBRARY_H_

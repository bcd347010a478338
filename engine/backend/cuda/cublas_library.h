// cuBLAS, loaded at run time (dlopen) by each CUDA session instead of linked into the binary.
//
// Why: libcublas and libcublasLt are several hundred MB of shared objects; linked, the dynamic
// loader maps and relocates them at every start (about 150 MiB of resident memory before main,
// even for `--device cpu`), and a machine without them could not start spillway-cli at all,
// not even to run on the CPU. Loaded here, they cost nothing until a CUDA session is created,
// and their absence is one more reason `--device auto` falls back to the CPU.
//
// Only the few entry points the session uses are resolved. The library is opened with
// RTLD_NODELETE: closing the handle never unmaps cuBLAS while its static state is alive.
#pragma once

#include <cublas_v2.h>

#include <memory>

#include "engine/common/expected.h"

namespace spw::cuda {

class CublasLibrary {
 public:
  /// Opens libcublas.so.<major of the headers built against> (the dynamic loader's search
  /// path, then the toolkit's library folder found at configure time) and resolves the entry
  /// points. Error: "cuBLAS could not be loaded: <dlerror>" or "... has no symbol '<name>'".
  static Expected<std::unique_ptr<CublasLibrary>> open();

  ~CublasLibrary();
  CublasLibrary(const CublasLibrary&) = delete;
  CublasLibrary& operator=(const CublasLibrary&) = delete;

  // The entry points, with the signatures of cublas_api.h (the _v2 symbols cublas_v2.h maps
  // the plain names to). decltype names no symbol, so nothing here is linked.
  decltype(::cublasCreate_v2)* create = nullptr;
  decltype(::cublasDestroy_v2)* destroy = nullptr;
  decltype(::cublasSetStream_v2)* set_stream = nullptr;
  decltype(::cublasSetWorkspace_v2)* set_workspace = nullptr;
  // cublasGemmEx is overloaded in C++ (an inline wrapper taking a cudaDataType compute type),
  // so its type is spelled out: the exported function's.
  using GemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                      int, int, const void*, const void*, cudaDataType, int,
                                      const void*, cudaDataType, int, const void*, void*,
                                      cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  GemmExFn gemm_ex = nullptr;

 private:
  CublasLibrary() = default;
  void* lib_ = nullptr;  // dlopen handle
};

/// "CUBLAS_STATUS_ALLOC_FAILED" for messages (without calling into cuBLAS).
const char* cublas_status_name(cublasStatus_t s);

}  // namespace spw::cuda

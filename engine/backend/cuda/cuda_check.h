// Error checks for CUDA runtime and cuBLAS calls inside functions that return Status or
// Expected<T>: the failing call becomes an Error naming the source location, the expression and
// the runtime's own description, and the function returns it. Nothing here holds CUDA state.
//
//   SPW_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream));
//   SPW_CUDA_CHECK(kernels::launch_add(a, b, y, n, stream));  // launchers return cudaError_t
//   SPW_CUBLAS_CHECK(cublasGemmEx(...));
//
// Message: "CUDA error at engine/backend/cuda/cuda_session.cpp:120: cudaMalloc(&p, n):
// out of memory (cudaErrorMemoryAllocation)".
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string_view>

#include "engine/backend/cuda/cublas_library.h"
#include "engine/common/expected.h"

namespace spw::cuda {

/// The path from "engine/" on (compilers pass absolute paths in __FILE__), for shorter messages.
inline std::string_view short_source_path(std::string_view file) {
  const size_t at = file.rfind("engine/");
  return at == std::string_view::npos ? file : file.substr(at);
}

/// The Error for a failed CUDA runtime call. Also clears the runtime's last-error slot, so a
/// non-sticky error (an allocation failure) does not resurface at the next, unrelated check.
inline Error cuda_error(const char* file, int line, const char* expr, cudaError_t e) {
  (void)cudaGetLastError();
  return make_error("CUDA error at {}:{}: {}: {} ({})", short_source_path(file), line, expr,
                    cudaGetErrorString(e), cudaGetErrorName(e));
}

/// The Error for a failed cuBLAS call. (The status is named here, not by cuBLAS: the library
/// is loaded at run time, cublas_library.h, and may be what failed.)
inline Error cublas_error(const char* file, int line, const char* expr, cublasStatus_t s) {
  return make_error("cuBLAS error at {}:{}: {}: {} ({})", short_source_path(file), line, expr,
                    cublas_status_name(s), static_cast<int>(s));
}

}  // namespace spw::cuda

/// Evaluates `expr` (a cudaError_t) once; on failure returns the Error from the enclosing
/// function (which must return Status or Expected<T>).
#define SPW_CUDA_CHECK(expr)                                                    \
  do {                                                                          \
    const cudaError_t spw_cuda_err_ = (expr);                                   \
    if (spw_cuda_err_ != cudaSuccess)                                           \
      return ::spw::cuda::cuda_error(__FILE__, __LINE__, #expr, spw_cuda_err_); \
  } while (0)

/// As SPW_CUDA_CHECK for a cublasStatus_t.
#define SPW_CUBLAS_CHECK(expr)                                                     \
  do {                                                                             \
    const cublasStatus_t spw_cublas_st_ = (expr);                                  \
    if (spw_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                   \
      return ::spw::cuda::cublas_error(__FILE__, __LINE__, #expr, spw_cublas_st_); \
  } while (0)

/// As SPW_CUDA_CHECK, for a call whose value is an Expected/Status itself: returns its Error.
#define SPW_TRY(expr)                             \
  do {                                            \
    auto spw_try_st_ = (expr);                    \
    if (!spw_try_st_) return spw_try_st_.error(); \
  } while (0)

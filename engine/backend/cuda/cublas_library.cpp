#include "engine/backend/cuda/cublas_library.h"

#include <dlfcn.h>

#include <string>
#include <type_traits>

#ifndef SPILLWAY_CUDA_LIBRARY_DIR
#define SPILLWAY_CUDA_LIBRARY_DIR ""
#endif

namespace spw::cuda {

const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "unknown cuBLAS status";
}

Expected<std::unique_ptr<CublasLibrary>> CublasLibrary::open() {
  const std::string soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  constexpr int kFlags = RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE;
  void* lib = dlopen(soname.c_str(), kFlags);
  std::string why = lib == nullptr ? std::string(dlerror()) : std::string();
  // The toolkit's own folder, for installs the dynamic loader is not told about.
  if (lib == nullptr && std::string(SPILLWAY_CUDA_LIBRARY_DIR).size() > 0) {
    const std::string full = std::string(SPILLWAY_CUDA_LIBRARY_DIR) + "/" + soname;
    lib = dlopen(full.c_str(), kFlags);
    if (lib == nullptr) why += std::string("; ") + dlerror();
  }
  if (lib == nullptr) return make_error("cuBLAS could not be loaded: {}", why);

  std::unique_ptr<CublasLibrary> c(new CublasLibrary());
  c->lib_ = lib;
  const auto resolve = [&](const char* name, auto& fn) -> Status {
    dlerror();
    void* sym = dlsym(lib, name);
    if (sym == nullptr) {
      return make_error("cuBLAS could not be loaded: {} has no symbol '{}'", soname, name);
    }
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(sym);
    return Status::Ok();
  };
  if (auto st = resolve("cublasCreate_v2", c->create); !st) return st.error();
  if (auto st = resolve("cublasDestroy_v2", c->destroy); !st) return st.error();
  if (auto st = resolve("cublasSetStream_v2", c->set_stream); !st) return st.error();
  if (auto st = resolve("cublasSetWorkspace_v2", c->set_workspace); !st) return st.error();
  if (auto st = resolve("cublasGemmEx", c->gemm_ex); !st) return st.error();
  return c;
}

CublasLibrary::~CublasLibrary() {
  if (lib_ != nullptr) dlclose(lib_);
}

}  // namespace spw::cuda

// kernels_loadable(): whether this build's device code runs on the current GPU.
#include <cuda_runtime.h>

#include "kernels/launch.h"

namespace spw::kernels {
namespace {

// Never launched: its attributes exist only if the fat binary holds SASS for the device's
// architecture or PTX the driver can JIT for it.
__global__ void probe_kernel() {}

}  // namespace

cudaError_t kernels_loadable() {
  cudaFuncAttributes attr{};
  const cudaError_t e = cudaFuncGetAttributes(&attr, probe_kernel);
  if (e != cudaSuccess) cudaGetLastError();  // clear it, so later calls do not see it
  return e;
}

}  // namespace spw::kernels

// CUDA device discovery: which devices this process sees, what they are, and whether this
// build's kernels run on them. The session factory (engine/backend/device.h) turns the result
// into a CudaProbe; nothing here is cached or kept at file scope (the CUDA runtime caches the
// driver state itself, so asking again is cheap).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/common/expected.h"

namespace spw::cuda {

/// One CUDA device as the runtime reports it.
struct DeviceInfo {
  int index = -1;                           // CUDA device ordinal
  std::string name;                         // "NVIDIA H200"
  int sm_major = 0, sm_minor = 0;           // compute capability
  int64_t free_bytes = 0, total_bytes = 0;  // cudaMemGetInfo, bytes
  std::string pci_bus_id;  // "0000:65:00.0" (domain:bus:device.function, lower-case hex)
  /// cudaSuccess when this build's kernels load on the device (kernels::kernels_loadable());
  /// cudaErrorNoKernelImageForDevice on a GPU older than the architectures built.
  cudaError_t kernels = cudaErrorUnknown;
  bool usable() const { return kernels == cudaSuccess; }
};

/// One device by ordinal: makes it current (cudaSetDevice, which creates its primary context),
/// reads its properties and free memory and tries the kernels (DeviceInfo::kernels). Errors:
/// an ordinal out of range or a device the runtime cannot open, naming the ordinal.
Expected<DeviceInfo> query_device(int index);

/// All devices, in ordinal order. Errors (user-facing, complete):
///   "no CUDA driver: libcuda.so.1 not found, is the NVIDIA driver installed?
///   [cudaErrorInsufficientDriver]" when no NVIDIA driver is installed;
///   "no CUDA driver: the NVIDIA driver supports CUDA 12.2 but this build needs 13.0 [...]";
///   "no CUDA device" (cudaErrorNoDevice or a count of 0);
///   "CUDA initialisation failed: <runtime message> [<error name>]" otherwise.
/// Selects each device in turn (cudaSetDevice, which creates its primary context) to read its
/// memory and try the kernels, and leaves the first usable one (else device 0) current.
Expected<std::vector<DeviceInfo>> list_devices();

/// The architectures this build's kernels were compiled for, as compute capabilities:
/// "8.6, 8.9, 9.0" (from CMAKE_CUDA_ARCHITECTURES; its raw value when not a list of numbers).
std::string built_architectures();

/// Why `d` is not usable, for the user: "device 0 (NVIDIA T4, compute capability 7.5) cannot
/// run this build's kernels (built for 8.6, 8.9, 9.0): no kernel image ... [cudaError...]", or
/// "device 1 (NAME, compute capability 9.0) is not usable: <runtime message>" for other failures.
/// Empty when d.usable().
std::string unusable_reason(const DeviceInfo& d);

/// "sm_90" for compute capability 9.0.
std::string sm_name(int sm_major, int sm_minor);

}  // namespace spw::cuda

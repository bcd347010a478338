#include "engine/backend/cuda/device.h"

#include <fmt/format.h>

#include <cctype>
#include <string_view>

#include "kernels/launch.h"

#ifndef SPILLWAY_CUDA_ARCHITECTURES
#define SPILLWAY_CUDA_ARCHITECTURES ""
#endif

namespace spw::cuda {

namespace {

// "13.0" from a CUDA version number such as 13000.
std::string cuda_version_string(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }

// The error of a failed cudaGetDeviceCount, for the user (the runtime's own text alone would
// say "driver version is insufficient" when there is no driver at all).
Error runtime_error(cudaError_t e) {
  int driver = 0, runtime = 0;
  (void)cudaDriverGetVersion(&driver);  // 0: no driver could be loaded
  (void)cudaRuntimeGetVersion(&runtime);
  switch (e) {
    case cudaErrorNoDevice:
      return make_error("no CUDA device");
    case cudaErrorInsufficientDriver:
    case cudaErrorCallRequiresNewerDriver:
      if (driver == 0) {
        return make_error(
            "no CUDA driver: libcuda.so.1 not found, is the NVIDIA driver "
            "installed? [{}]",
            cudaGetErrorName(e));
      }
      return make_error(
          "no CUDA driver: the NVIDIA driver supports CUDA {} but this build needs "
          "{} [{}]",
          cuda_version_string(driver), cuda_version_string(runtime), cudaGetErrorName(e));
    case cudaErrorStubLibrary:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorInitializationError:
    case cudaErrorSystemNotReady:
    case cudaErrorDevicesUnavailable:
      return make_error("no CUDA driver: {} [{}]", cudaGetErrorString(e), cudaGetErrorName(e));
    default:
      return make_error("CUDA initialisation failed: {} [{}]", cudaGetErrorString(e),
                        cudaGetErrorName(e));
  }
}

}  // namespace

std::string sm_name(int sm_major, int sm_minor) {
  return fmt::format("sm_{}{}", sm_major, sm_minor);
}

std::string built_architectures() {
  // CMAKE_CUDA_ARCHITECTURES joined with ',': "86-real,89-real,90" -> "8.6, 8.9, 9.0".
  const std::string_view raw = SPILLWAY_CUDA_ARCHITECTURES;
  std::string out;
  size_t pos = 0;
  while (pos <= raw.size()) {
    size_t end = raw.find(',', pos);
    if (end == std::string_view::npos) end = raw.size();
    std::string_view item = raw.substr(pos, end - pos);
    if (const size_t dash = item.find('-'); dash != std::string_view::npos)
      item = item.substr(0, dash);  // "-real" / "-virtual"
    size_t digits = 0;
    while (digits < item.size() && std::isdigit(static_cast<unsigned char>(item[digits]))) ++digits;
    if (item.size() < 2 || digits != item.size()) return std::string(raw);  // "native", "all"
    if (!out.empty()) out += ", ";
    out += fmt::format("{}.{}", item.substr(0, item.size() - 1), item.back());
    pos = end + 1;
  }
  return out.empty() ? std::string(raw) : out;
}

std::string unusable_reason(const DeviceInfo& d) {
  if (d.usable()) return {};
  if (d.kernels != cudaErrorNoKernelImageForDevice && d.kernels != cudaErrorInvalidDeviceFunction &&
      d.kernels != cudaErrorInvalidPtx && d.kernels != cudaErrorUnsupportedPtxVersion) {
    return fmt::format("device {} ({}, compute capability {}.{}) is not usable: {} [{}]", d.index,
                       d.name, d.sm_major, d.sm_minor, cudaGetErrorString(d.kernels),
                       cudaGetErrorName(d.kernels));
  }
  return fmt::format(
      "device {} ({}, compute capability {}.{}) cannot run this build's kernels (built for {}): "
      "{} [{}]",
      d.index, d.name, d.sm_major, d.sm_minor, built_architectures(), cudaGetErrorString(d.kernels),
      cudaGetErrorName(d.kernels));
}

Expected<DeviceInfo> query_device(int index) {
  DeviceInfo d;
  d.index = index;
  cudaDeviceProp prop{};
  if (const cudaError_t e = cudaGetDeviceProperties(&prop, index); e != cudaSuccess) {
    (void)cudaGetLastError();
    return make_error("CUDA device {}: {} [{}]", index, cudaGetErrorString(e), cudaGetErrorName(e));
  }
  d.name = prop.name;
  d.sm_major = prop.major;
  d.sm_minor = prop.minor;
  d.total_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  // As sysfs names the device (/sys/bus/pci/devices/<id>), for its NUMA node.
  d.pci_bus_id =
      fmt::format("{:04x}:{:02x}:{:02x}.0", prop.pciDomainID, prop.pciBusID, prop.pciDeviceID);
  // Free memory and kernel images are per device: make it current (creates its context).
  cudaError_t e = cudaSetDevice(index);
  if (e == cudaSuccess) {
    size_t free_b = 0, total_b = 0;
    e = cudaMemGetInfo(&free_b, &total_b);
    if (e == cudaSuccess) {
      d.free_bytes = static_cast<int64_t>(free_b);
      d.total_bytes = static_cast<int64_t>(total_b);
      e = kernels::kernels_loadable();
    }
  }
  if (e != cudaSuccess) (void)cudaGetLastError();
  d.kernels = e;
  return d;
}

Expected<std::vector<DeviceInfo>> list_devices() {
  int count = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    (void)cudaGetLastError();
    return runtime_error(e);
  }
  if (count <= 0) return make_error("no CUDA device");

  std::vector<DeviceInfo> devices;
  int first_usable = -1;
  for (int i = 0; i < count; ++i) {
    auto d = query_device(i);
    if (!d) {  // listed but not openable: keep it, unusable, with the reason
      DeviceInfo bad;
      bad.index = i;
      bad.name = "unknown";
      bad.kernels = cudaErrorInvalidDevice;
      devices.push_back(std::move(bad));
      continue;
    }
    if (d->usable() && first_usable < 0) first_usable = i;
    devices.push_back(std::move(*d));
  }
  if (cudaSetDevice(first_usable >= 0 ? first_usable : 0) != cudaSuccess) (void)cudaGetLastError();
  return devices;
}

}  // namespace spw::cuda

// Helpers for the CUDA tests (tests/cuda): skip cleanly without a usable device, RAII device
// buffers, and host<->device copies that fail the test on any CUDA error.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

namespace spw::test {

/// Empty when a CUDA device is usable, else the reason (no driver, no device, ...).
inline std::string cuda_unusable_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();                      // clear the sticky error for later calls
    if (e == cudaErrorInsufficientDriver) {  // also what the runtime says when there is none
      return "no usable CUDA device: no NVIDIA driver, or one too old for this CUDA runtime "
             "(cudaErrorInsufficientDriver)";
    }
    return std::string("no usable CUDA device: ") + cudaGetErrorString(e);
  }
  if (n == 0) return "no CUDA device found";
  return {};
}

/// In a TEST body: GTEST_SKIP() with the reason when no device is usable.
#define SPW_SKIP_WITHOUT_CUDA()                                          \
  do {                                                                   \
    const std::string spw_reason_ = ::spw::test::cuda_unusable_reason(); \
    if (!spw_reason_.empty()) GTEST_SKIP() << spw_reason_;               \
  } while (0)

/// ASSERT/EXPECT a cudaError_t is cudaSuccess, printing its name.
#define SPW_ASSERT_CUDA(expr)                                                      \
  do {                                                                             \
    const cudaError_t spw_e_ = (expr);                                             \
    ASSERT_EQ(spw_e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(spw_e_); \
  } while (0)

/// A device buffer of n elements of T, freed at scope exit.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n = 0) { resize(n); }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void resize(size_t n) {
    cudaFree(p_);
    p_ = nullptr;
    n_ = n;
    if (n > 0 && cudaMalloc(reinterpret_cast<void**>(&p_), n * sizeof(T)) != cudaSuccess) {
      p_ = nullptr;
      n_ = 0;
    }
  }
  /// Host -> device; false on a CUDA error.
  bool upload(const std::vector<T>& h) {
    if (h.size() != n_) resize(h.size());
    return h.empty() ||
           cudaMemcpy(p_, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess;
  }
  /// Device -> host after a cudaDeviceSynchronize; empty vector on a CUDA error.
  std::vector<T> download() const {
    std::vector<T> h(n_);
    if (cudaDeviceSynchronize() != cudaSuccess) return {};
    if (n_ && cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess)
      return {};
    return h;
  }
  /// Fills every byte with 0xFF (NaN for floats) so unwritten outputs show.
  bool poison() { return n_ == 0 || cudaMemset(p_, 0xFF, n_ * sizeof(T)) == cudaSuccess; }
  T* get() { return p_; }
  const T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace spw::test

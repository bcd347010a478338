#include "engine/backend/cuda/gpu_window.h"

#include <cstring>

#include "engine/backend/cuda/cuda_check.h"

namespace spw::cuda {

Expected<std::unique_ptr<GpuWindow>> GpuWindow::create(int device, uint8_t* base, int64_t n_slots,
                                                       int64_t slot_bytes, cudaStream_t compute) {
  std::unique_ptr<GpuWindow> w(new GpuWindow(device, base, n_slots, slot_bytes, compute));
  const auto init = [&]() -> Status {
    SPW_CUDA_CHECK(cudaSetDevice(device));
    SPW_CUDA_CHECK(cudaStreamCreateWithFlags(&w->copy_, cudaStreamNonBlocking));
    SPW_CUDA_CHECK(cudaEventCreateWithFlags(&w->queued_, cudaEventDisableTiming));
    void* p = nullptr;
    SPW_CUDA_CHECK(cudaHostAlloc(&p, static_cast<size_t>(slot_bytes), cudaHostAllocDefault));
    w->staging_ = static_cast<uint8_t*>(p);
    return Status::Ok();
  };
  if (Status st = init(); !st) return st.error();
  return w;
}

GpuWindow::~GpuWindow() {
  // Errors are ignored: nothing can be done about them while tearing down.
  if (copy_ != nullptr) {
    (void)cudaStreamSynchronize(copy_);
    (void)cudaStreamDestroy(copy_);
  }
  if (queued_ != nullptr) (void)cudaEventDestroy(queued_);
  if (staging_ != nullptr) (void)cudaFreeHost(staging_);
}

Status GpuWindow::zero(int32_t i) {
  SPW_CUDA_CHECK(cudaMemsetAsync(slot(i), 0, static_cast<size_t>(slot_bytes_), compute_));
  return Status::Ok();
}

Status GpuWindow::copy_out(int32_t i, uint8_t* dst) {
  std::lock_guard<std::mutex> lock(mu_);
  SPW_CUDA_CHECK(cudaSetDevice(device_));  // the copy thread has no current device of its own
  SPW_CUDA_CHECK(cudaEventRecord(queued_, compute_));
  SPW_CUDA_CHECK(cudaStreamWaitEvent(copy_, queued_, 0));
  SPW_CUDA_CHECK(cudaMemcpyAsync(staging_, slot(i), static_cast<size_t>(slot_bytes_),
                                 cudaMemcpyDeviceToHost, copy_));
  SPW_CUDA_CHECK(cudaStreamSynchronize(copy_));
  std::memcpy(dst, staging_, static_cast<size_t>(slot_bytes_));
  d2h_bytes_.fetch_add(slot_bytes_, std::memory_order_relaxed);
  return Status::Ok();
}

Status GpuWindow::copy_in(int32_t i, const uint8_t* src) {
  std::lock_guard<std::mutex> lock(mu_);
  SPW_CUDA_CHECK(cudaSetDevice(device_));
  std::memcpy(staging_, src, static_cast<size_t>(slot_bytes_));
  SPW_CUDA_CHECK(cudaMemcpyAsync(slot(i), staging_, static_cast<size_t>(slot_bytes_),
                                 cudaMemcpyHostToDevice, compute_));
  SPW_CUDA_CHECK(cudaStreamSynchronize(compute_));
  h2d_bytes_.fetch_add(slot_bytes_, std::memory_order_relaxed);
  return Status::Ok();
}

}  // namespace spw::cuda

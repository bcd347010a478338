// Shared by the CUDA kernels (kernels/*.cu) and by the CPU tests that check their arithmetic:
// SPW_HD marks the math that must compile both as device code (nvcc) and as plain C++ (g++),
// so the block decoding and log-sum-exp rules are tested here without a GPU.
#pragma once

#if defined(__CUDACC__)
#define SPW_HD __host__ __device__ __forceinline__
#else
#define SPW_HD inline
#endif

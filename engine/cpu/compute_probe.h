// Short compute-throughput probes of the CPU the fast path runs on, the compute roof beside
// the RAM probe's bandwidth roof (engine/kv/bandwidth_probe.h): `spillway-cli bench` reports
// prefill's FLOP rate against them.
//
// Both probes run on `n_threads` threads of a fresh pool (the caller's thread included), each
// thread a register-resident loop of independent dependency chains (no memory traffic), at the
// active SIMD level (engine/cpu/simd.h): 512-bit vectors at avx512, 256-bit at avx2, plain
// scalar code at scalar. Best of 3 timed runs of `seconds` each (about; at least one loop).
#pragma once

namespace spw::cpu {

/// FP32 fused multiply-add throughput in GFLOP/s (1e9 FLOP/s, a multiply-add counting 2).
/// avx512: VFMADD231PS zmm; avx2: VFMADD231PS ymm; scalar: a plain float loop.
double probe_fp32_gflops_per_s(int n_threads, double seconds = 0.05);

/// int8 dot-product throughput in GOP/s (1e9 int8 multiply-adds x 2 per second, so that it is
/// comparable with a GEMM's 2 x multiply-adds): avx512: VPDPBUSD zmm (u8 x s8, 64 per
/// instruction); avx2: VPMADDUBSW + VPMADDWD + VPADDD per 32 products (the AVX2 sequence of
/// the int8 kernels; AVX-VNNI is not used); scalar: a plain int loop.
double probe_int8_gops_per_s(int n_threads, double seconds = 0.05);

}  // namespace spw::cpu

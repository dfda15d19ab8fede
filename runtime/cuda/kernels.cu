// Kernels of the GPU challenge (attest/gpuproof): generate the seeded
// matrices and multiply them modulo 2^32. kernels.ptx is made from this file
// by `go generate ./runtime/cuda` (clang's NVPTX back end, no CUDA toolkit
// needed); nvcc compiles it too (`nvcc -ptx -arch=sm_70 kernels.cu`).
//
// elem must stay bit-for-bit equal to gpuproof.Elem (Go): a splitmix64
// finaliser of the key plus the element's (matrix, index) counter.
#ifdef __clang__
#ifndef __CUDA__
#error "compile as CUDA"
#endif
#endif
#ifndef __NVCC__
// clang with -nocudainc: the few CUDA names used here.
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define TID_X __nvvm_read_ptx_sreg_tid_x()
#define BID_X __nvvm_read_ptx_sreg_ctaid_x()
#define BID_Y __nvvm_read_ptx_sreg_ctaid_y()
#define BDIM_X __nvvm_read_ptx_sreg_ntid_x()
#define SYNC() __syncthreads()
#else
#include <stdint.h>
#define TID_X threadIdx.x
#define BID_X blockIdx.x
#define BID_Y blockIdx.y
#define BDIM_X blockDim.x
#define SYNC() __syncthreads()
#endif

__device__ static inline uint32_t elem(uint64_t key, uint32_t which, uint32_t idx) {
  uint64_t z = key + ((((uint64_t)which) << 40) | (uint64_t)idx) * 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z = z ^ (z >> 31);
  return (uint32_t)(z >> 32);
}

// gen fills out[0..count) with matrix `which`'s elements.
extern "C" __global__ void gp_gen(uint32_t *out, uint64_t key, uint32_t which, uint32_t count) {
  uint32_t i = BID_X * BDIM_X + TID_X;
  if (i < count) out[i] = elem(key, which, i);
}

// matmul: C = A·B (n×n, row-major, arithmetic modulo 2^32). n must be a
// multiple of 128; launched with 256 threads per block and an
// (n/128)×(n/128) grid. Each block computes a 128×128 tile of C, each thread
// an 8×8 sub-tile (rows ty+16i, columns tx+16j), over 8-deep slabs of A and
// B staged in shared memory.
#define TS 128
#define TK 8
extern "C" __global__ void gp_matmul(const uint32_t *A, const uint32_t *B, uint32_t *C, uint32_t n) {
  __shared__ uint32_t As[TK][TS];
  __shared__ uint32_t Bs[TK][TS];
  uint32_t t = TID_X;
  uint32_t tx = t % 16, ty = t / 16;
  uint32_t row0 = BID_Y * TS, col0 = BID_X * TS;
  uint32_t acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; i++)
#pragma unroll
    for (int j = 0; j < 8; j++) acc[i][j] = 0;
  for (uint32_t k0 = 0; k0 < n; k0 += TK) {
#pragma unroll
    for (int l = 0; l < 4; l++) {
      uint32_t e = t + l * 256;  // 0..1023
      uint32_t ar = e / TK, ac = e % TK;
      As[ac][ar] = A[(uint64_t)(row0 + ar) * n + k0 + ac];
      uint32_t br = e / TS, bc = e % TS;
      Bs[br][bc] = B[(uint64_t)(k0 + br) * n + col0 + bc];
    }
    SYNC();
#pragma unroll
    for (int kk = 0; kk < TK; kk++) {
      uint32_t a[8], b[8];
#pragma unroll
      for (int i = 0; i < 8; i++) a[i] = As[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 8; j++) b[j] = Bs[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[i][j] += a[i] * b[j];
    }
    SYNC();
  }
#pragma unroll
  for (int i = 0; i < 8; i++)
#pragma unroll
    for (int j = 0; j < 8; j++) C[(uint64_t)(row0 + ty + 16 * i) * n + col0 + tx + 16 * j] = acc[i][j];
}

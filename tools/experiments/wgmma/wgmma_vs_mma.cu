// Does `wgmma.mma_async ... m64nNk16.f32.f16.f16` (A from registers, B from shared memory) give the
// same bits as `mma.sync.m16n8k16.f32.f16.f16.f32` on the same operands, for the products the qmm
// kernels form (a zero-accumulator k16 step, then a second k16 step accumulated onto it, and a
// product accumulated onto an arbitrary C)? And is the no-swizzle K-major descriptor right
// (LBO = distance of K-adjacent core matrices, SBO = distance of N-adjacent ones)?
//
// Build and run (sm_90a): nvcc -O2 -arch=sm_90a -o wgmma_vs_mma wgmma_vs_mma.cu && ./wgmma_vs_mma
// Prints, per data distribution and N, the number of outputs whose bits differ (expected: 0).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <cuda_runtime.h>
#include <vector>

#define CK(x)                                                                                      \
  do {                                                                                             \
    cudaError_t e = (x);                                                                           \
    if (e != cudaSuccess) {                                                                        \
      fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e));                   \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

constexpr int M = 64, K = 32;  // 4 warps × 16 rows, two k16 steps

__device__ __forceinline__ uint32_t pack(const uint16_t* p, int i0, int i1) {
  uint32_t lo = p[i0], hi = p[i1];
  return lo | (hi << 16);
}

// A fragment of k16 step s for lane (g, t) of warp w: rows 16w+g, 16w+g+8; k = 16s + 2t(+1), +8.
__device__ __forceinline__ void a_frag(const uint16_t* A, int w, int lane, int s, uint32_t a[4]) {
  int g = lane / 4, t = lane % 4, r0 = 16 * w + g, k0 = 16 * s + 2 * t;
  a[0] = pack(A, r0 * K + k0, r0 * K + k0 + 1);
  a[1] = pack(A, (r0 + 8) * K + k0, (r0 + 8) * K + k0 + 1);
  a[2] = pack(A, r0 * K + k0 + 8, r0 * K + k0 + 9);
  a[3] = pack(A, (r0 + 8) * K + k0 + 8, (r0 + 8) * K + k0 + 9);
}

// Output: D[r][c] with r < 64, c < N. Accumulator layout (both paths): tile j, regs 4j+0..3 =
// (row g, cols 8j+2t, +1), (row g+8, same cols).
template <int N>
__global__ void k_mma(const uint16_t* As, const uint16_t* Bs, const float* Cs, float* Ds, int with_c) {
  const uint16_t* A = As + blockIdx.x * M * K;
  const uint16_t* B = Bs + blockIdx.x * N * K;  // B[c][k]
  const float* C = Cs + blockIdx.x * M * N;
  float* D = Ds + blockIdx.x * M * N;
  int lane = threadIdx.x % 32, w = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  uint32_t a0[4], a1[4];
  a_frag(A, w, lane, 0, a0);
  a_frag(A, w, lane, 1, a1);
  for (int j = 0; j < N / 8; j++) {
    int c = 8 * j + g;
    float d[4];
    int r0 = 16 * w + g;
    int cc = 8 * j + 2 * t;
    if (with_c) {
      d[0] = C[r0 * N + cc];
      d[1] = C[r0 * N + cc + 1];
      d[2] = C[(r0 + 8) * N + cc];
      d[3] = C[(r0 + 8) * N + cc + 1];
    } else {
      d[0] = d[1] = d[2] = d[3] = 0.f;
    }
    for (int s = 0; s < 2; s++) {
      uint32_t b0 = pack(B, c * K + 16 * s + 2 * t, c * K + 16 * s + 2 * t + 1);
      uint32_t b1 = pack(B, c * K + 16 * s + 2 * t + 8, c * K + 16 * s + 2 * t + 9);
      uint32_t* a = s == 0 ? a0 : a1;
      if (s == 0 && !with_c) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%10,%10,%10,%10};"
            : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.f));
      } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
      }
    }
    D[r0 * N + cc] = d[0];
    D[r0 * N + cc + 1] = d[1];
    D[(r0 + 8) * N + cc] = d[2];
    D[(r0 + 8) * N + cc + 1] = d[3];
  }
}

__device__ __forceinline__ uint64_t desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((saddr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32);
}

template <int N>
__device__ __forceinline__ void wgmma(float (&d)[N / 2], const uint32_t a[4], uint64_t db, int scale_d);

#define WG_ARGS12 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11}"
template <>
__device__ __forceinline__ void wgmma<24>(float (&d)[12], const uint32_t a[4], uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %17, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n24k16.f32.f16.f16 " WG_ARGS12
      ", {%12,%13,%14,%15}, %16, p, 1, 1, 0;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}
template <>
__device__ __forceinline__ void wgmma<8>(float (&d)[4], const uint32_t a[4], uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, 0;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

// Shared B, step s, core matrix (kk, j): 8 columns × 8 k (16 B per column) at
// s·STEP + j·SBO + kk·LBO. `swap` exchanges the roles of LBO and SBO in the descriptor (to find
// out which one the hardware reads as which if the expected one fails).
template <int N>
__global__ void k_wgmma(const uint16_t* As, const uint16_t* Bs, const float* Cs, float* Ds, int with_c, int swap) {
  constexpr uint32_t LBO = 128, SBO = 256, STEP = 2 * 128 * (N / 8);
  __shared__ __align__(128) uint16_t sb[2 * 16 * N];
  const uint16_t* A = As + blockIdx.x * M * K;
  const uint16_t* B = Bs + blockIdx.x * N * K;
  const float* C = Cs + blockIdx.x * M * N;
  float* D = Ds + blockIdx.x * M * N;
  int lane = threadIdx.x % 32, w = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  for (int i = threadIdx.x; i < N * K; i += blockDim.x) {
    int c = i / K, k = i % K, s = k / 16, kk = (k % 16) / 8, j = c / 8;
    uint32_t off = s * STEP + j * SBO + kk * LBO + (c % 8) * 16 + (k % 8) * 2;
    sb[off / 2] = B[c * K + k];
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  uint32_t a0[4], a1[4];
  a_frag(A, w, lane, 0, a0);
  a_frag(A, w, lane, 1, a1);
  float d[N / 2];
  int r0 = 16 * w + g;
  for (int j = 0; j < N / 8; j++) {
    int cc = 8 * j + 2 * t;
    if (with_c) {
      d[4 * j + 0] = C[r0 * N + cc];
      d[4 * j + 1] = C[r0 * N + cc + 1];
      d[4 * j + 2] = C[(r0 + 8) * N + cc];
      d[4 * j + 3] = C[(r0 + 8) * N + cc + 1];
    } else {
      d[4 * j] = d[4 * j + 1] = d[4 * j + 2] = d[4 * j + 3] = 0.f;
    }
  }
  uint32_t base = (uint32_t)__cvta_generic_to_shared(sb);
  uint32_t l = swap ? SBO : LBO, s_ = swap ? LBO : SBO;
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  wgmma<N>(d, a0, desc(base, l, s_), with_c);
  wgmma<N>(d, a1, desc(base + STEP, l, s_), 1);
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  for (int j = 0; j < N / 8; j++) {
    int cc = 8 * j + 2 * t;
    D[r0 * N + cc] = d[4 * j + 0];
    D[r0 * N + cc + 1] = d[4 * j + 1];
    D[(r0 + 8) * N + cc] = d[4 * j + 2];
    D[(r0 + 8) * N + cc + 1] = d[4 * j + 3];
  }
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next() {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 16);
}
static float unif() { return (next() & 0xFFFFFF) / 16777216.0f; }

// dist 0: wide exponents (signed, 2^-12 .. 2^12); 1: Q4_K-like (A = 1024 + q, q < 16; x in ±4);
// 2: Q8_0-like (A = 1152 + q, q in −128..127; x in ±2^[−6, 6]); 3: normal-ish small.
// f32 → f16 bits, round to nearest even (inputs here are finite and within f16's normal range or 0).
static uint16_t f2h(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  int e = (int)((x >> 23) & 0xff) - 127 + 15;
  uint32_t m = x & 0x7fffff;
  if ((x & 0x7fffffff) == 0) return sign;
  if (e <= 0) {  // subnormal
    m |= 0x800000;
    int sh = 14 - e;
    uint32_t h = m >> sh, rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);
    if (rem > half || (rem == half && (h & 1))) h++;
    return sign | h;
  }
  uint32_t h = ((uint32_t)e << 10) | (m >> 13), rem = m & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
  return sign | h;
}

static uint16_t gen(int dist, bool is_a) {
  float v;
  switch (dist) {
    case 0: v = ldexpf(1.0f + unif(), (int)(next() % 25) - 12) * ((next() & 1) ? -1 : 1); break;
    case 1: v = is_a ? 1024.0f + (next() % 16) : (unif() * 8 - 4); break;
    case 2: v = is_a ? 1152.0f + (int)(next() % 256) - 128 : ldexpf(unif() * 2 - 1, (int)(next() % 13) - 6); break;
    default: v = unif() * 2 - 1; break;
  }
  return f2h(v);
}

template <int N>
static void run(int dist, int with_c, int blocks) {
  std::vector<uint16_t> A(blocks * M * K), B(blocks * N * K);
  std::vector<float> C(blocks * M * N);
  for (auto& a : A) a = gen(dist, true);
  for (auto& b : B) b = gen(dist, false);
  for (auto& c : C) c = ldexpf(unif() * 2 - 1, (int)(next() % 31) - 5);
  uint16_t *dA, *dB;
  float *dC, *d1, *d2;
  CK(cudaMalloc(&dA, A.size() * 2));
  CK(cudaMalloc(&dB, B.size() * 2));
  CK(cudaMalloc(&dC, C.size() * 4));
  CK(cudaMalloc(&d1, C.size() * 4));
  CK(cudaMalloc(&d2, C.size() * 4));
  CK(cudaMemcpy(dA, A.data(), A.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dB, B.data(), B.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dC, C.data(), C.size() * 4, cudaMemcpyHostToDevice));
  k_mma<N><<<blocks, 128>>>(dA, dB, dC, d1, with_c);
  CK(cudaGetLastError());
  std::vector<float> r1(C.size()), r2(C.size());
  CK(cudaMemcpy(r1.data(), d1, C.size() * 4, cudaMemcpyDeviceToHost));
  // The swapped descriptor is only tried when the expected one fails (it reads outside `sb`).
  for (int swap = 0; swap < 2; swap++) {
    k_wgmma<N><<<blocks, 128>>>(dA, dB, dC, d2, with_c, swap);
    CK(cudaGetLastError());
    CK(cudaMemcpy(r2.data(), d2, C.size() * 4, cudaMemcpyDeviceToHost));
    long diff = 0, far = 0;
    for (size_t i = 0; i < r1.size(); i++) {
      if (memcmp(&r1[i], &r2[i], 4) != 0) {
        diff++;
        if (fabsf(r1[i] - r2[i]) > 1e-3f * fabsf(r1[i]) + 1e-6f) far++;
      }
    }
    printf("N=%2d dist=%d with_c=%d desc=%s: %ld of %zu outputs differ in bits (%ld beyond 1e-3 rel)\n", N, dist,
           with_c, swap ? "swapped" : "LBO=K,SBO=N", diff, r1.size(), far);
    if (diff == 0) break;
  }
  cudaFree(dA);
  cudaFree(dB);
  cudaFree(dC);
  cudaFree(d1);
  cudaFree(d2);
}

int main() {
  for (int dist = 0; dist < 4; dist++)
    for (int with_c = 0; with_c < 2; with_c++) {
      run<8>(dist, with_c, 2000);
      run<24>(dist, with_c, 2000);
    }
  return 0;
}

// What a phase boundary costs on the device: a kernel boundary in a chain of programmatic-dependent
// launches captured in a CUDA graph (what the engine does between its ≈ 670 kernels per forward)
// against a grid-wide barrier inside one persistent kernel (what a persistent per-layer kernel would
// do instead). docs/perf/spec.md, "the round after the eighteenth session", lever (b).
//
// Build and run on the GPU machine (no Rust needed):
//   nvcc -O3 -arch=sm_90a -o /tmp/gb tools/experiments/grid_barrier/grid_barrier_vs_launch.cu && /tmp/gb
//
// Each phase does what the engine's smallest kernels do: every block reads one value the previous
// phase wrote (a different block's) and writes one, so a phase depends on the whole previous one.
// Printed: µs per phase boundary, for grids of 1 block per SM and 2 per SM (the matmuls' 264 slots),
// and the chained phase with a 4 KB row read and written per block.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e = (x);                                                                        \
    if (e != cudaSuccess) {                                                                     \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e));         \
      exit(1);                                                                                  \
    }                                                                                           \
  } while (0)

// One phase of the chain: wait for the previous kernel (programmatic dependent launch), read the
// value a neighbouring block wrote, write ours.
__global__ void phase_kernel(unsigned* buf, int phase, int pdl) {
  if (pdl) {
    asm volatile("griddepcontrol.launch_dependents;");
    asm volatile("griddepcontrol.wait;" ::: "memory");
  }
  if (threadIdx.x == 0) {
    unsigned n = gridDim.x;
    unsigned prev = buf[(phase & 1) * n + (blockIdx.x + 1) % n];
    buf[((phase + 1) & 1) * n + blockIdx.x] = prev + 1;
  }
}

// The same phase with a row per block: every thread reads 16 bytes of a neighbouring block's row
// of the previous phase (4 KB per block, L2) and writes 16 bytes of its own — the floor of the
// engine's small kernels (one dependent L2 read, one write, the boundary).
__global__ void row_phase_kernel(uint4* rows, int phase, int pdl) {
  if (pdl) {
    asm volatile("griddepcontrol.launch_dependents;");
    asm volatile("griddepcontrol.wait;" ::: "memory");
  }
  unsigned n = gridDim.x, t = threadIdx.x, w = blockDim.x;
  uint4 v = rows[((phase & 1) * n + (blockIdx.x + 1) % n) * w + t];
  v.x += 1;
  rows[(((phase + 1) & 1) * n + blockIdx.x) * w + t] = v;
}

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void red_release_add(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// `phases` phases in one kernel, separated by a grid barrier: a monotone arrival counter (block
// thread 0 adds 1 with release semantics, then spins with acquire loads until all blocks of this
// phase have arrived), then the block barrier.
__global__ void persistent_kernel(unsigned* buf, unsigned* counter, int phases, int spin_ns) {
  unsigned n = gridDim.x;
  for (int phase = 0; phase < phases; ++phase) {
    if (threadIdx.x == 0) {
      unsigned prev = buf[(phase & 1) * n + (blockIdx.x + 1) % n];
      buf[((phase + 1) & 1) * n + blockIdx.x] = prev + 1;
      red_release_add(counter, 1);
      unsigned target = (unsigned)(phase + 1) * n;
      while (ld_acquire(counter) < target) {
        if (spin_ns > 0) __nanosleep(spin_ns);
      }
    }
    __syncthreads();
  }
}

// The best of 5 timed runs of `run` (enqueued on `s` between events `a` and `b`, each after an
// untimed `before`) after a warm-up, ms.
template <typename Before, typename Run>
float best_ms(cudaStream_t s, cudaEvent_t a, cudaEvent_t b, Before before, Run run) {
  float best = 1e30f;
  for (int rep = 0; rep < 6; ++rep) {
    before();
    CK(cudaEventRecord(a, s));
    run();
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (rep > 0 && ms < best) best = ms;
  }
  return best;
}

// `phases` launches of `launch(cfg, phase)` (grid `grid` of `threads`, chained by programmatic
// dependent launch where `pdl`) captured in one graph; the best of 5 replays after a warm-up, ms.
template <typename Launch>
float graph_best_ms(cudaStream_t s, cudaEvent_t a, cudaEvent_t b, int phases, int grid, int threads, int pdl,
                    Launch launch) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int p = 0; p < phases; ++p) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(threads);
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    launch(&cfg, p);
  }
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  float best = best_ms(s, a, b, [] {}, [&] { CK(cudaGraphLaunch(ge, s)); });
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  return best;
}

int main() {
  int dev = 0;
  CK(cudaSetDevice(dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  const int sms = prop.multiProcessorCount;
  const int phases = 2000;
  const int threads = 256;
  unsigned *buf, *counter;
  CK(cudaMalloc(&buf, 2 * 4 * sms * sizeof(unsigned)));
  CK(cudaMalloc(&counter, sizeof(unsigned)));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));

  for (int per_sm : {1, 2}) {
    int grid = per_sm * sms;
    // Chained launches captured in a graph, with and without programmatic dependent launch.
    for (int pdl : {0, 1}) {
      float best = graph_best_ms(s, a, b, phases, grid, threads, pdl, [&](cudaLaunchConfig_t* cfg, int p) {
        CK(cudaLaunchKernelEx(cfg, phase_kernel, buf, p, pdl));
      });
      printf("grid %4d (%d per SM): kernel boundary, graph of %d launches%s: %.3f us per boundary\n", grid, per_sm,
             phases, pdl ? ", programmatic dependent launch" : "", best * 1e3f / phases);
    }
    // The row phase: one dependent 4 KB read and a 4 KB write per block, chained with PDL.
    {
      uint4* rows;
      CK(cudaMalloc(&rows, 2 * (size_t)grid * threads * sizeof(uint4)));
      CK(cudaMemset(rows, 0, 2 * (size_t)grid * threads * sizeof(uint4)));
      float best = graph_best_ms(s, a, b, phases, grid, threads, 1, [&](cudaLaunchConfig_t* cfg, int p) {
        CK(cudaLaunchKernelEx(cfg, row_phase_kernel, rows, p, 1));
      });
      printf("grid %4d (%d per SM): kernel boundary + a dependent 4 KB read and write per block (PDL graph): %.3f us per phase\n",
             grid, per_sm, best * 1e3f / phases);
      CK(cudaFree(rows));
    }
    // One persistent cooperative kernel (every block resident by construction).
    int max_blocks = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&max_blocks, persistent_kernel, threads, 0));
    if (max_blocks < per_sm) {
      printf("grid %4d: persistent kernel does not fit (%d blocks per SM)\n", grid, max_blocks);
      continue;
    }
    for (int spin_ns : {0, 32, 100}) {
      int ph = phases;
      void* args[] = {&buf, &counter, &ph, &spin_ns};
      float best = best_ms(s, a, b, [&] { CK(cudaMemsetAsync(counter, 0, sizeof(unsigned), s)); }, [&] {
        CK(cudaLaunchCooperativeKernel((void*)persistent_kernel, dim3(grid), dim3(threads), args, 0, s));
      });
      printf("grid %4d (%d per SM): grid barrier in one persistent kernel (nanosleep %3d ns between polls): %.3f us per barrier\n",
             grid, per_sm, spin_ns, best * 1e3f / phases);
    }
  }
  CK(cudaDeviceSynchronize());
  return 0;
}

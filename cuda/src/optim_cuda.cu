// CUDA build of the sparse-optimizer core, from the same math header as the CPU build.
//
// A step is a fixed pipeline on the caller's stream, in a workspace the caller allocated (torch's caching
// allocator: runtime/native/cuda.py), so a steady training loop makes no cudaMalloc or cudaFree and the
// host waits once per step, for 16 bytes (the first bad id's position and the unique-row count):
//  1. prepare: every id range-checked (an out-of-range one sets a device-side flag, the atomicMin of its
//     position), copied as a sort key of 32 bits where the table has at most 2^32 rows, its position beside;
//  2. stable radix sort (CUB) of the (key, position) pairs over only the bits the row count needs: each
//     id's duplicates stay in batch order, so their sums are the CPU core's, in its order;
//  3. segment heads (CUB select): where each unique id starts in the sorted batch, and their count, both
//     left on the device;
//  4. fused reduce and update: one warp per unique row (float4 loads where rows are 16-byte aligned) sums
//     its gradient rows in batch order (or averages them), then applies the optimizer's element primitives
//     of optim_math.h to the row and its state; the reduced gradient never goes to memory. Row-wise
//     Adagrad's mean of g'^2 is a warp reduction; Adam's two powers for the row's bias corrections run on
//     two lanes at once. Nothing is touched when the flag is set (kernels read it first);
//  5. one copy of the flag and the count to the host, one stream synchronisation.
// Gather and overwrite (scatter: the last position of a duplicated id wins) use the same stages.
// Stages 1-3 and 5 are in segments.cuh, the error boundary of the C ABI in cuda_boundary.cuh.
//
// No exception and no CUDA error crosses the C ABI: every exported function returns an error code and
// leaves a message naming itself, the stage and the CUDA error in a thread-local string
// (gt_cuda_last_error). CUB reports errors as return codes; the try blocks catch what std::string may throw.
// Device pointers and the device index come from the caller, which checked every tensor's device, dtype
// and shape first. Built with nvcc when GRAPHTRAIN_BUILD_CUDA=1 (cuda/nvcc.py: sm_80, sm_90 and PTX).

#include "graphtrain/abi.h"
#include "graphtrain/api.h"
#include "graphtrain/optim_math.h"
#include "cuda_boundary.cuh"
#include "segments.cuh"

#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <string>

using graphtrain::AdamCoef;
using graphtrain::OptimParams;

namespace {

using namespace graphtrain::cuda_core;  // the boundary's codes and the segment stages

// ------------------------------------------------------------------------------------------------ kernels

// Adam with one step count per table: count this step (only when every id was valid) and its coefficients.
__global__ void global_step_kernel(int64_t* step, OptimParams p, Info* info) {
  if (flagged(info)) return;
  info->global_coef = graphtrain::adam_coef(++*step, p);
}

// VEC consecutive floats of a row, as one load or store where rows are 16-byte aligned.
template <int VEC>
struct Vec {
  float v[VEC];
  __device__ __forceinline__ void load(const float* src) {
    if constexpr (VEC == 4) {
      const float4 x = *reinterpret_cast<const float4*>(src);
      v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
    } else {
      for (int k = 0; k < VEC; ++k) v[k] = src[k];
    }
  }
  __device__ __forceinline__ void store(float* dst) const {
    if constexpr (VEC == 4) {
      *reinterpret_cast<float4*>(dst) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
      for (int k = 0; k < VEC; ++k) dst[k] = v[k];
    }
  }
};

// One unique row's reduced gradient at columns [j, j + VEC): its rows summed in batch order (the first
// copied, as the CPU core does), divided by the count for the mean rule.
template <int VEC>
__device__ __forceinline__ Vec<VEC> reduced(const float* grads, const int* pos, int begin, int end, int64_t dim,
                                            int64_t j, int mean) {
  Vec<VEC> g;
  g.load(grads + static_cast<int64_t>(pos[begin]) * dim + j);
  for (int k = begin + 1; k < end; ++k) {
    Vec<VEC> x;
    x.load(grads + static_cast<int64_t>(pos[k]) * dim + j);
    for (int e = 0; e < VEC; ++e) g.v[e] += x.v[e];
  }
  if (mean && end - begin > 1) {
    const float c = static_cast<float>(end - begin);
    for (int e = 0; e < VEC; ++e) g.v[e] /= c;  // divide, as the CPU core and the reference do
  }
  return g;
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int off = kWarp / 2; off > 0; off >>= 1) x += __shfl_xor_sync(kFull, x, off);
  return x;  // the same total, summed in the same order, in every lane
}

// The fused reduce + update, one warp per unique row (grid-stride over the segments the select found).
template <typename Key, int VEC>
__global__ void __launch_bounds__(kBlock)
    step_kernel(int32_t kind, int n, const Key* keys, const int* pos, const int* starts, Info* info,
                const float* __restrict__ grads, int64_t dim, int mean, float* __restrict__ table,
                float* __restrict__ s0, float* __restrict__ s1, int64_t* __restrict__ row_steps, int global_step,
                OptimParams p) {
  if (flagged(info)) return;
  const int num_unique = info->num_unique;
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  const float wd = p.weight_decay;
  for (int64_t s = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp; s < num_unique;
       s += warps) {
    const int begin = starts[s], end = s + 1 < num_unique ? starts[s + 1] : n;
    const int64_t r = static_cast<int64_t>(keys[begin]);
    float* w = table + r * dim;
    switch (kind) {
      case graphtrain::kSGD:
        for (int64_t j = lane * VEC; j < dim; j += kWarp * VEC) {
          const Vec<VEC> g = reduced<VEC>(grads, pos, begin, end, dim, j, mean);
          Vec<VEC> x;
          x.load(w + j);
          for (int e = 0; e < VEC; ++e) graphtrain::sgd_elem(x.v[e], graphtrain::maybe_decayed(g.v[e], x.v[e], wd), p);
          x.store(w + j);
        }
        break;
      case graphtrain::kAdagrad:
        for (int64_t j = lane * VEC; j < dim; j += kWarp * VEC) {
          const Vec<VEC> g = reduced<VEC>(grads, pos, begin, end, dim, j, mean);
          Vec<VEC> x, G;
          x.load(w + j);
          G.load(s0 + r * dim + j);
          for (int e = 0; e < VEC; ++e)
            graphtrain::adagrad_elem(x.v[e], G.v[e], graphtrain::maybe_decayed(g.v[e], x.v[e], wd), p);
          x.store(w + j);
          G.store(s0 + r * dim + j);
        }
        break;
      case graphtrain::kRowwiseAdagrad: {
        // Two passes: the mean of g'^2 needs the whole row first. The second pass reads the gradient
        // rows again, from L1/L2 (this warp read them a moment ago), rather than keeping them anywhere.
        float sq = 0.0f;
        for (int64_t j = lane * VEC; j < dim; j += kWarp * VEC) {
          const Vec<VEC> g = reduced<VEC>(grads, pos, begin, end, dim, j, mean);
          Vec<VEC> x;
          if (wd != 0.0f) x.load(w + j);
          for (int e = 0; e < VEC; ++e) {
            const float gd = wd != 0.0f ? graphtrain::decayed(g.v[e], x.v[e], wd) : g.v[e];
            sq += gd * gd;
          }
        }
        const float total = warp_sum(sq);
        float scale = 0.0f;
        if (lane == 0) {
          s0[r] = graphtrain::rowwise_accumulate(s0[r], total, dim);
          scale = graphtrain::rowwise_scale(s0[r], p);
        }
        scale = __shfl_sync(kFull, scale, 0);
        for (int64_t j = lane * VEC; j < dim; j += kWarp * VEC) {
          const Vec<VEC> g = reduced<VEC>(grads, pos, begin, end, dim, j, mean);
          Vec<VEC> x;
          x.load(w + j);
          for (int e = 0; e < VEC; ++e)
            graphtrain::rowwise_elem(x.v[e], graphtrain::maybe_decayed(g.v[e], x.v[e], wd), scale);
          x.store(w + j);
        }
        break;
      }
      case graphtrain::kAdam: {
        AdamCoef c;
        if (global_step) {
          c = info->global_coef;
        } else {
          int64_t t = 0;
          if (lane == 0) t = ++row_steps[r];
          t = __shfl_sync(kFull, t, 0);
          // lane 0: 1 - beta1^t, lane 1: 1 - beta2^t, at once; every lane then has both
          const double bc = graphtrain::adam_bias_correction(lane == 1 ? p.beta2_exact : p.beta1_exact, t);
          c = graphtrain::adam_coef_from(__shfl_sync(kFull, bc, 0), __shfl_sync(kFull, bc, 1), p);
        }
        for (int64_t j = lane * VEC; j < dim; j += kWarp * VEC) {
          const Vec<VEC> g = reduced<VEC>(grads, pos, begin, end, dim, j, mean);
          Vec<VEC> x, m, v;
          x.load(w + j);
          m.load(s0 + r * dim + j);
          v.load(s1 + r * dim + j);
          for (int e = 0; e < VEC; ++e)
            graphtrain::adam_elem(x.v[e], m.v[e], v.v[e], graphtrain::maybe_decayed(g.v[e], x.v[e], wd), p, c);
          x.store(w + j);
          m.store(s0 + r * dim + j);
          v.store(s1 + r * dim + j);
        }
        break;
      }
      default:
        break;
    }
  }
}

// out[i] = table[ids[i]], one warp per row; an out-of-range id sets the flag and is not read.
template <int VEC>
__global__ void __launch_bounds__(kBlock)
    gather_kernel(int64_t n, const int64_t* ids, const float* __restrict__ table, int64_t dim, int64_t num_rows,
                  float* __restrict__ out, Info* info) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp; i < n; i += warps) {
    const int64_t id = ids[i];
    if (id < 0 || id >= num_rows) {
      if (lane == 0) atomicMin(&info->bad, static_cast<unsigned long long>(i));
      continue;
    }
    for (int64_t j = lane * VEC; j < dim; j += kWarp * VEC) {
      Vec<VEC> x;
      x.load(table + id * dim + j);
      x.store(out + i * dim + j);
    }
  }
}

// table[id] = values[last position of id], one warp per unique id, nothing when the flag is set.
template <typename Key, int VEC>
__global__ void __launch_bounds__(kBlock)
    scatter_kernel(int n, const Key* keys, const int* pos, const int* starts, Info* info,
                   const float* __restrict__ values, float* __restrict__ table, int64_t dim) {
  if (flagged(info)) return;
  const int num_unique = info->num_unique;
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t s = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp; s < num_unique;
       s += warps) {
    const int begin = starts[s], end = s + 1 < num_unique ? starts[s + 1] : n;
    const int64_t r = static_cast<int64_t>(keys[begin]);
    const int64_t last = pos[end - 1];
    for (int64_t j = lane * VEC; j < dim; j += kWarp * VEC) {
      Vec<VEC> x;
      x.load(values + last * dim + j);
      x.store(table + r * dim + j);
    }
  }
}

// --------------------------------------------------------------------------------------------------- host

bool vec4_ok(int64_t dim, std::initializer_list<const void*> ptrs) {
  if (dim % 4 != 0) return false;
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

template <typename Key>
int64_t sparse_step_impl(const char* fn, int32_t kind, int n, const int64_t* ids, const float* grads, int64_t dim,
                         int64_t num_rows, int32_t mean, float* table, float* state0, float* state1, int64_t* steps,
                         int32_t global_step, const OptimParams& params, cudaStream_t stream, char* workspace,
                         int64_t workspace_bytes, int64_t* bad_pos) {
  Segments<Key> sg;
  cudaError_t err = cudaSuccess;
  if (const char* stage = segment<Key>(n, ids, num_rows, workspace, workspace_bytes, stream, &sg, &err))
    return fail(fn, stage, err);
  const bool adam_global = kind == graphtrain::kAdam && global_step;
  if (adam_global) {
    global_step_kernel<<<1, 1, 0, stream>>>(steps, params, sg.info);
    if ((err = cudaGetLastError()) != cudaSuccess) return fail(fn, "global step kernel launch", err);
  }
  int64_t* row_steps = kind == graphtrain::kAdam && !global_step ? steps : nullptr;
  const int blocks = blocks_for_warps(n);
  if (vec4_ok(dim, {grads, table, state0, state1}))
    step_kernel<Key, 4><<<blocks, kBlock, 0, stream>>>(kind, n, sg.keys, sg.pos, sg.starts, sg.info, grads, dim, mean,
                                                      table, state0, state1, row_steps, adam_global, params);
  else
    step_kernel<Key, 1><<<blocks, kBlock, 0, stream>>>(kind, n, sg.keys, sg.pos, sg.starts, sg.info, grads, dim, mean,
                                                      table, state0, state1, row_steps, adam_global, params);
  if ((err = cudaGetLastError()) != cudaSuccess) return fail(fn, "update kernel launch", err);
  Info host{};
  if (const char* stage = finish(sg.info, stream, &host, &err)) return fail(fn, stage, err);
  if (host.bad != kNoBad) {
    *bad_pos = static_cast<int64_t>(host.bad);
    return kBadId;
  }
  return host.num_unique;
}

template <typename Key>
int scatter_impl(const char* fn, int n, const int64_t* ids, const float* values, float* table, int64_t dim,
                 int64_t num_rows, cudaStream_t stream, char* workspace, int64_t workspace_bytes, int64_t* bad_pos) {
  Segments<Key> sg;
  cudaError_t err = cudaSuccess;
  if (const char* stage = segment<Key>(n, ids, num_rows, workspace, workspace_bytes, stream, &sg, &err))
    return fail(fn, stage, err);
  const int blocks = blocks_for_warps(n);
  if (vec4_ok(dim, {values, table}))
    scatter_kernel<Key, 4><<<blocks, kBlock, 0, stream>>>(n, sg.keys, sg.pos, sg.starts, sg.info, values, table, dim);
  else
    scatter_kernel<Key, 1><<<blocks, kBlock, 0, stream>>>(n, sg.keys, sg.pos, sg.starts, sg.info, values, table, dim);
  if ((err = cudaGetLastError()) != cudaSuccess) return fail(fn, "scatter kernel launch", err);
  Info host{};
  if (const char* stage = finish(sg.info, stream, &host, &err)) return fail(fn, stage, err);
  if (host.bad != kNoBad) {
    *bad_pos = static_cast<int64_t>(host.bad);
    return kBadId;
  }
  return 0;
}

bool batch_fits(int64_t n) { return n >= 0 && n <= INT32_MAX; }

}  // namespace

GT_DEFINE_ABI_EXPORTS()

// The message of this thread's last failed call (valid until its next call).
GT_API const char* gt_cuda_last_error() { return last_error.c_str(); }

// Whether this library can run on `device`: info = {runtime version it was built with, driver version,
// device count, compute capability (major * 10 + minor), the update kernel's binary and PTX versions}.
// Returns 0, or kCudaError with the reason (no driver, a driver older than the runtime, no such device,
// no kernel image for its architecture). Loads the kernels' module; runs nothing.
GT_API int gt_cuda_probe(int32_t device, int64_t* info) {
  const char* fn = "gt_cuda_probe";
  try {
    for (int k = 0; k < 6; ++k) info[k] = 0;
    info[0] = CUDART_VERSION;
    int driver = 0;
    cudaError_t err = cudaDriverGetVersion(&driver);
    if (err != cudaSuccess) return fail(fn, "driver version", err);
    info[1] = driver;
    if (driver == 0) {
      last_error = std::string(fn) + ": no CUDA driver (libcuda.so.1 not found: cudaDriverGetVersion reports 0)";
      return kCudaError;
    }
    if (driver < CUDART_VERSION) {
      last_error = std::string(fn) + ": the CUDA driver supports CUDA " + std::to_string(driver / 1000) + "." +
                   std::to_string(driver % 1000 / 10) + ", this core was built with CUDA " +
                   std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10) +
                   ": update the driver or build the core with the toolkit torch uses";
      return kCudaError;
    }
    int count = 0;
    if ((err = cudaGetDeviceCount(&count)) != cudaSuccess) return fail(fn, "device count", err);
    info[2] = count;
    if (device < 0 || device >= count) {
      last_error = std::string(fn) + ": no CUDA device " + std::to_string(device) + " (" + std::to_string(count) +
                   " present)";
      return kCudaError;
    }
    int major = 0, minor = 0;
    if ((err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device)) != cudaSuccess ||
        (err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device)) != cudaSuccess)
      return fail(fn, "compute capability", err);
    info[3] = major * 10 + minor;
    DeviceGuard guard(device);
    if (guard.err != cudaSuccess) return fail(fn, "select the device", guard.err);
    cudaFuncAttributes attr{};
    if ((err = cudaFuncGetAttributes(&attr, step_kernel<uint32_t, 4>)) != cudaSuccess)
      return fail(fn, "the update kernel's attributes (no image for this architecture?)", err);
    info[4] = attr.binaryVersion;
    info[5] = attr.ptxVersion;
    return 0;
  } catch (...) {
    return fail_exception(fn);
  }
}

// Bytes of device workspace that a call of `op` (0: sparse step, 1: scatter, 2: gather) on n ids of a
// table of num_rows rows needs on `device`, in *bytes.
GT_API int gt_cuda_workspace_bytes(int32_t op, int64_t n, int64_t num_rows, int32_t device, int64_t* bytes) {
  const char* fn = "gt_cuda_workspace_bytes";
  try {
    *bytes = 0;
    if (!batch_fits(n)) return fail_arg(fn, "a batch of " + std::to_string(n) + " ids (at most 2^31 - 1)");
    if (op == 2 || n == 0) {
      *bytes = static_cast<int64_t>(aligned(sizeof(Info)));
      return 0;
    }
    DeviceGuard guard(device);
    if (guard.err != cudaSuccess) return fail(fn, "select the device", guard.err);
    size_t need = 0;
    const cudaError_t err = small_keys(num_rows) ? workspace_bytes_for<uint32_t>(static_cast<int>(n), num_rows, &need)
                                                 : workspace_bytes_for<uint64_t>(static_cast<int>(n), num_rows, &need);
    if (err != cudaSuccess) return fail(fn, "CUB temporary storage size", err);
    *bytes = static_cast<int64_t>(need);
    return 0;
  } catch (...) {
    return fail_exception(fn);
  }
}

// One optimizer step: returns the unique-row count, kBadId (*bad_pos = the first bad position, nothing
// touched), kCudaError or kBadArgument. steps: Adam's per-row counts, or with global_step its table's one
// count, which the step increments on the device once every id is known valid (an empty batch counts).
GT_API int64_t gt_cuda_sparse_step(int32_t kind, int64_t n, const int64_t* ids, const float* grads, int64_t dim,
                                   int64_t num_rows, int32_t mean, float* table, float* state0, float* state1,
                                   int64_t* steps, int32_t global_step, OptimParams params, int32_t device,
                                   void* stream_ptr, void* workspace, int64_t workspace_bytes, int64_t* bad_pos) {
  const char* fn = "gt_cuda_sparse_step";
  try {
    *bad_pos = -1;
    if (!batch_fits(n)) return fail_arg(fn, "a batch of " + std::to_string(n) + " ids (at most 2^31 - 1)");
    const bool adam_global = kind == graphtrain::kAdam && global_step;
    if (n == 0 && !adam_global) return 0;
    DeviceGuard guard(device);
    if (guard.err != cudaSuccess) return fail(fn, "select the device", guard.err);
    cudaGetLastError();  // a stale launch error of an earlier call is not this call's
    cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
    if (n == 0) {  // nothing to check or update: only count the step, without waiting for it
      if (workspace_bytes < static_cast<int64_t>(sizeof(Info))) return fail_arg(fn, "no workspace for the flag");
      Info* info = static_cast<Info*>(workspace);
      cudaError_t err = cudaMemsetAsync(info, 0xff, kInfoHostBytes, stream);
      if (err != cudaSuccess) return fail(fn, "clear the flag", err);
      global_step_kernel<<<1, 1, 0, stream>>>(steps, params, info);
      if ((err = cudaGetLastError()) != cudaSuccess) return fail(fn, "global step kernel launch", err);
      return 0;
    }
    char* ws = static_cast<char*>(workspace);
    return small_keys(num_rows)
               ? sparse_step_impl<uint32_t>(fn, kind, static_cast<int>(n), ids, grads, dim, num_rows, mean, table,
                                            state0, state1, steps, global_step, params, stream, ws, workspace_bytes,
                                            bad_pos)
               : sparse_step_impl<uint64_t>(fn, kind, static_cast<int>(n), ids, grads, dim, num_rows, mean, table,
                                            state0, state1, steps, global_step, params, stream, ws, workspace_bytes,
                                            bad_pos);
  } catch (...) {
    return fail_exception(fn);
  }
}

GT_API int gt_cuda_gather(int64_t n, const int64_t* ids, const float* table, int64_t dim, int64_t num_rows, float* out,
                          int32_t device, void* stream_ptr, void* workspace, int64_t workspace_bytes,
                          int64_t* bad_pos) {
  const char* fn = "gt_cuda_gather";
  try {
    *bad_pos = -1;
    if (n == 0) return 0;
    if (workspace_bytes < static_cast<int64_t>(sizeof(Info))) return fail_arg(fn, "no workspace for the flag");
    DeviceGuard guard(device);
    if (guard.err != cudaSuccess) return fail(fn, "select the device", guard.err);
    cudaGetLastError();
    cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
    Info* info = static_cast<Info*>(workspace);
    cudaError_t err = cudaMemsetAsync(info, 0xff, kInfoHostBytes, stream);
    if (err != cudaSuccess) return fail(fn, "clear the flag", err);
    if (vec4_ok(dim, {table, out}))
      gather_kernel<4><<<blocks_for_warps(n), kBlock, 0, stream>>>(n, ids, table, dim, num_rows, out, info);
    else
      gather_kernel<1><<<blocks_for_warps(n), kBlock, 0, stream>>>(n, ids, table, dim, num_rows, out, info);
    if ((err = cudaGetLastError()) != cudaSuccess) return fail(fn, "gather kernel launch", err);
    Info host{};
    if (const char* stage = finish(info, stream, &host, &err)) return fail(fn, stage, err);
    if (host.bad != kNoBad) {
      *bad_pos = static_cast<int64_t>(host.bad);
      return kBadId;
    }
    return 0;
  } catch (...) {
    return fail_exception(fn);
  }
}

// table[ids[i]] = values[i]; the last position of a duplicated id wins (the stable sort keeps batch order).
GT_API int gt_cuda_scatter(int64_t n, const int64_t* ids, const float* values, float* table, int64_t dim,
                           int64_t num_rows, int32_t device, void* stream_ptr, void* workspace,
                           int64_t workspace_bytes, int64_t* bad_pos) {
  const char* fn = "gt_cuda_scatter";
  try {
    *bad_pos = -1;
    if (!batch_fits(n)) return fail_arg(fn, "a batch of " + std::to_string(n) + " ids (at most 2^31 - 1)");
    if (n == 0) return 0;
    DeviceGuard guard(device);
    if (guard.err != cudaSuccess) return fail(fn, "select the device", guard.err);
    cudaGetLastError();
    cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
    char* ws = static_cast<char*>(workspace);
    return small_keys(num_rows) ? scatter_impl<uint32_t>(fn, static_cast<int>(n), ids, values, table, dim, num_rows,
                                                         stream, ws, workspace_bytes, bad_pos)
                                : scatter_impl<uint64_t>(fn, static_cast<int>(n), ids, values, table, dim, num_rows,
                                                         stream, ws, workspace_bytes, bad_pos);
  } catch (...) {
    return fail_exception(fn);
  }
}

// CUDA build of the sparse-optimizer core, from the same math header as the CPU build.
//
// A step is a fixed pipeline on the caller's stream, in a workspace the caller allocated (torch's caching
// allocator: runtime/native/cuda.py), so a steady training loop makes no cudaMalloc or cudaFree and the
// host waits once per step, for 24 bytes (the first bad id's position, the first non-finite gradient row
// and the unique-row count):
//  1. prepare: every id range-checked (an out-of-range one sets a device-side flag, the atomicMin of its
//     position), copied as a sort key of 32 bits where the table has at most 2^32 rows, its position beside;
//  2. stable radix sort (CUB) of the (key, position) pairs over only the bits the row count needs: each
//     id's duplicates stay in batch order;
//  3. segment heads (CUB select): where each unique id starts in the sorted batch, and their count, both
//     left on the device; (asked to refuse non-finite gradients: one pass over them sets a second flag);
//  4. ids seen more than kDirect (16) times: a plan kernel lists their chunks of kSumChunk positions and
//     one warp per chunk sums its rows in batch order (eight row loads in flight) into a partial row. A
//     Zipf batch's hottest id (10^5 of 10^6 ids) is then ~500 warps' work instead of one warp's chain of
//     10^5 dependent loads, which made the whole step as long as that chain (20-38x a uniform step);
//  5. fused reduce and update: a warp takes 32 unique rows (their metadata in one load per lane), a group
//     of lanes one row (narrow rows share a warp), four rows per group at once (two for Adam) so their
//     loads overlap; a row's gradient is its one row, its few rows added in order, or its chunks' sums
//     added in order: the canonical order of optim_math.h, which the CPU core follows too, so both are
//     bitwise equal and deterministic. Then the optimizer's element primitives of optim_math.h on the row
//     and its state, and (row_norm) the row scaled to its norm; the reduced gradient never goes to memory.
//     Row-wise Adagrad keeps a one-step-wide row's gradient in registers between its two passes. Nothing
//     is touched when a flag is set (kernels read them first);
//  6. one copy of the flags and the count to the host, one stream synchronisation; or, asked to defer them
//     (a step captured as a CUDA graph: runtime/optim/late.py), one kernel writing them to three int64 on
//     the device for the caller to read a step later, and no wait at all.
// Gather and overwrite (scatter: the last position of a duplicated id wins) use the same stages.
// Stages 1-3 and 6 are in segments.cuh, 4-5 in update_kernels.cuh, the error boundary of the C ABI in cuda_boundary.cuh.
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

// A deferred call's flags and count, for its caller to read later: {first bad position, first non-finite
// gradient row (each -1 for none), unique rows (0 when flagged or empty)}.
__global__ void report_kernel(const Info* info, int n, int64_t* out) {
  out[0] = info->bad == kNoBad ? -1 : static_cast<int64_t>(info->bad);
  out[1] = info->nonfinite == kNoBad ? -1 : static_cast<int64_t>(info->nonfinite);
  out[2] = flagged(info) || n == 0 ? 0 : info->num_unique;
}

#include "update_kernels.cuh"  // Vec, the finite, plan, chunk and update kernels

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

// Lanes per row: enough for one column step of VEC floats each, at least 4 (Adam's two bias corrections
// run on lanes 0 and 1 of a group), at most the warp.
int group_for(int64_t dim, int vec) {
  const int64_t need = (dim + vec - 1) / vec;
  int g = 4;
  while (g < kWarp && g < need) g <<= 1;
  return g;
}

template <typename Key, int VEC, int KIND, int TD>
cudaError_t launch_step(const StepArgs<Key>& a, int blocks, cudaStream_t stream) {
  // rows per group at once: Adam holds four vectors per row, row-wise Adagrad keeps its gradient
  constexpr int U = KIND == graphtrain::kAdam || KIND == graphtrain::kRowwiseAdagrad ? 2 : 4;
  step_kernel<Key, VEC, KIND, U, TD><<<blocks, kBlock, 0, stream>>>(a);
  return cudaGetLastError();
}

template <typename Key, int VEC, int TD>
cudaError_t launch_kind(int32_t kind, const StepArgs<Key>& a, int blocks, cudaStream_t stream) {
  switch (kind) {
    case graphtrain::kSGD:
      return launch_step<Key, VEC, graphtrain::kSGD, TD>(a, blocks, stream);
    case graphtrain::kAdagrad:
      return launch_step<Key, VEC, graphtrain::kAdagrad, TD>(a, blocks, stream);
    case graphtrain::kRowwiseAdagrad:
      return launch_step<Key, VEC, graphtrain::kRowwiseAdagrad, TD>(a, blocks, stream);
    case graphtrain::kAdam:
      return launch_step<Key, VEC, graphtrain::kAdam, TD>(a, blocks, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

// The update kernels of the table's element type (float32, float16 or bfloat16 rows).
template <typename Key, int VEC>
cudaError_t launch_typed(int32_t kind, int32_t table_dtype, const StepArgs<Key>& a, int blocks, cudaStream_t stream) {
  switch (table_dtype) {
    case graphtrain::kTableFloat32:
      return launch_kind<Key, VEC, graphtrain::kTableFloat32>(kind, a, blocks, stream);
    case graphtrain::kTableFloat16:
      return launch_kind<Key, VEC, graphtrain::kTableFloat16>(kind, a, blocks, stream);
    case graphtrain::kTableBFloat16:
      return launch_kind<Key, VEC, graphtrain::kTableBFloat16>(kind, a, blocks, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

struct StepCall {
  int32_t kind;
  int n;
  const int64_t* ids;
  const float* grads;
  int64_t dim, num_rows;
  int32_t mean;
  void* table;
  int32_t table_dtype;
  uint64_t round_seed;
  float *state0, *state1;
  int64_t* steps;
  int32_t global_step;
  float row_norm;
  int32_t finite;
  OptimParams params;
  int64_t* flags_out;
};

template <typename Key>
int64_t sparse_step_impl(const char* fn, const StepCall& c, cudaStream_t stream, char* workspace,
                         int64_t workspace_bytes, int64_t* bad_pos) {
  Segments<Key> sg;
  cudaError_t err = cudaSuccess;
  if (const char* stage = segment<Key>(c.n, c.ids, c.num_rows, c.dim, workspace, workspace_bytes, stream, &sg, &err))
    return fail(fn, stage, err);
  if (c.finite) {
    finite_kernel<<<blocks_for_threads(c.n * c.dim), kBlock, 0, stream>>>(c.n * c.dim, c.dim, c.grads, sg.info);
    if ((err = cudaGetLastError()) != cudaSuccess) return fail(fn, "finite check kernel launch", err);
  }
  const bool adam_global = c.kind == graphtrain::kAdam && c.global_step;
  // row-wise Adagrad's one accumulator per row is read one float at a time: its alignment does not matter
  const float* rows_state0 = c.kind == graphtrain::kRowwiseAdagrad ? nullptr : c.state0;
  const bool vec4 = vec4_ok(c.dim, {c.grads, c.table, rows_state0, c.state1, sg.partials});
  if (sg.max_chunks > 0) {  // the ids seen more than kDirect times: their chunks summed on many warps
    plan_kernel<<<blocks_for_threads(c.n), kBlock, 0, stream>>>(c.n, sg.starts, sg.info, sg.chunks, sg.first_chunk);
    if ((err = cudaGetLastError()) != cudaSuccess) return fail(fn, "chunk plan kernel launch", err);
    const int64_t slabs = (c.dim + kWarp * (vec4 ? 4 : 1) - 1) / (kWarp * (vec4 ? 4 : 1));
    const int blocks = blocks_for_warps(sg.max_chunks * slabs);
    if (vec4)
      chunk_kernel<4><<<blocks, kBlock, 0, stream>>>(sg.pos, sg.info, sg.chunks, c.grads, c.dim, sg.partials);
    else
      chunk_kernel<1><<<blocks, kBlock, 0, stream>>>(sg.pos, sg.info, sg.chunks, c.grads, c.dim, sg.partials);
    if ((err = cudaGetLastError()) != cudaSuccess) return fail(fn, "chunk sum kernel launch", err);
  }
  StepArgs<Key> a{c.n,       sg.keys,      sg.pos,   sg.starts, sg.info, c.grads,
                  sg.partials, sg.first_chunk, c.dim,  c.mean,    group_for(c.dim, vec4 ? 4 : 1),
                  c.table,   c.round_seed, c.state0, c.state1,
                  c.kind == graphtrain::kAdam && !c.global_step ? c.steps : nullptr,
                  adam_global, c.row_norm, c.params};
  if (adam_global) {  // counted last before the update, so no failed launch leaves a step counted
    global_step_kernel<<<1, 1, 0, stream>>>(c.steps, c.params, sg.info);
    if ((err = cudaGetLastError()) != cudaSuccess) return fail(fn, "global step kernel launch", err);
  }
  const int blocks = blocks_for_warps((static_cast<int64_t>(c.n) + kWarp - 1) / kWarp);
  err = vec4 ? launch_typed<Key, 4>(c.kind, c.table_dtype, a, blocks, stream)
             : launch_typed<Key, 1>(c.kind, c.table_dtype, a, blocks, stream);
  if (err != cudaSuccess) return fail(fn, "update kernel launch", err);
  if (c.flags_out != nullptr) {  // deferred: the flags stay on the device, nothing waits
    report_kernel<<<1, 1, 0, stream>>>(sg.info, c.n, c.flags_out);
    if ((err = cudaGetLastError()) != cudaSuccess) return fail(fn, "report kernel launch", err);
    return 0;
  }
  Info host{};
  if (const char* stage = finish(sg.info, stream, &host, &err)) return fail(fn, stage, err);
  if (host.bad != kNoBad) {
    *bad_pos = static_cast<int64_t>(host.bad);
    return kBadId;
  }
  if (host.nonfinite != kNoBad) {
    *bad_pos = static_cast<int64_t>(host.nonfinite);
    return kNonFinite;
  }
  return host.num_unique;
}

template <typename Key>
int scatter_impl(const char* fn, int n, const int64_t* ids, const float* values, float* table, int64_t dim,
                 int64_t num_rows, cudaStream_t stream, char* workspace, int64_t workspace_bytes, int64_t* bad_pos) {
  Segments<Key> sg;
  cudaError_t err = cudaSuccess;
  if (const char* stage = segment<Key>(n, ids, num_rows, 0, workspace, workspace_bytes, stream, &sg, &err))
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

// Positions are 32-bit; the chunk loops add up to kSumChunk to one, so a batch keeps clear of the top.
constexpr int64_t kMaxBatch = INT32_MAX - 2 * graphtrain::kSumChunk;
bool batch_fits(int64_t n) { return n >= 0 && n <= kMaxBatch; }

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
    if ((err = cudaFuncGetAttributes(&attr, step_kernel<uint32_t, 4, graphtrain::kSGD, 4, graphtrain::kTableFloat32>)) !=
        cudaSuccess)
      return fail(fn, "the update kernel's attributes (no image for this architecture?)", err);
    info[4] = attr.binaryVersion;
    info[5] = attr.ptxVersion;
    return 0;
  } catch (...) {
    return fail_exception(fn);
  }
}

// Bytes of device workspace that a call of `op` (0: sparse step, 1: scatter, 2: gather) on n ids of a
// table of num_rows rows of dim floats needs on `device`, in *bytes.
GT_API int gt_cuda_workspace_bytes(int32_t op, int64_t n, int64_t num_rows, int64_t dim, int32_t device,
                                   int64_t* bytes) {
  const char* fn = "gt_cuda_workspace_bytes";
  try {
    *bytes = 0;
    if (!batch_fits(n)) return fail_arg(fn, "a batch of " + std::to_string(n) + " ids (at most " + std::to_string(kMaxBatch) + ")");
    if (op == 2 || n == 0) {
      *bytes = static_cast<int64_t>(aligned(sizeof(Info)));
      return 0;
    }
    DeviceGuard guard(device);
    if (guard.err != cudaSuccess) return fail(fn, "select the device", guard.err);
    size_t need = 0;
    const int64_t d = op == 0 ? dim : 0;  // only a step sums chunks
    const cudaError_t err = small_keys(num_rows)
                                ? workspace_bytes_for<uint32_t>(static_cast<int>(n), num_rows, d, &need)
                                : workspace_bytes_for<uint64_t>(static_cast<int>(n), num_rows, d, &need);
    if (err != cudaSuccess) return fail(fn, "CUB temporary storage size", err);
    *bytes = static_cast<int64_t>(need);
    return 0;
  } catch (...) {
    return fail_exception(fn);
  }
}

// One optimizer step: returns the unique-row count, kBadId (*bad_pos = the first bad position, nothing
// touched), kNonFinite (finite asked and *bad_pos = the first gradient row holding NaN or infinity,
// nothing touched), kCudaError or kBadArgument. steps: Adam's per-row counts, or with global_step its
// table's one count, which the step increments on the device once every id is known valid (an empty
// batch counts). row_norm > 0: every updated row is then scaled to that L2 norm (float32 tables). table_dtype
// (graphtrain::TableDtype): float32 rows, or float16 / bfloat16 rows stepped in float32 and written back with
// stochastic rounding keyed by round_seed, bit for bit as the CPU core's. flags_out (a device pointer to three
// int64, or null): defer the checks' verdict there (report_kernel) and return 0 without waiting for the
// device; nothing is touched when a flag is set, as in a waited call.
GT_API int64_t gt_cuda_sparse_step(int32_t kind, int64_t n, const int64_t* ids, const float* grads, int64_t dim,
                                   int64_t num_rows, int32_t mean, void* table, int32_t table_dtype,
                                   uint64_t round_seed, float* state0, float* state1,
                                   int64_t* steps, int32_t global_step, OptimParams params, float row_norm,
                                   int32_t finite, int32_t device, void* stream_ptr, void* workspace,
                                   int64_t workspace_bytes, int64_t* flags_out, int64_t* bad_pos) {
  const char* fn = "gt_cuda_sparse_step";
  try {
    *bad_pos = -1;
    if (!batch_fits(n)) return fail_arg(fn, "a batch of " + std::to_string(n) + " ids (at most " + std::to_string(kMaxBatch) + ")");
    if (kind < graphtrain::kSGD || kind > graphtrain::kAdam) return fail_arg(fn, "optimizer kind " + std::to_string(kind));
    if (table_dtype < graphtrain::kTableFloat32 || table_dtype > graphtrain::kTableBFloat16)
      return fail_arg(fn, "table element type " + std::to_string(table_dtype));
    if (table_dtype != graphtrain::kTableFloat32 && row_norm > 0.0f)
      return fail_arg(fn, "a row norm on a half table (its rows are projected after the step)");
    const bool adam_global = kind == graphtrain::kAdam && global_step;
    if (n == 0 && !adam_global && flags_out == nullptr) return 0;
    DeviceGuard guard(device);
    if (guard.err != cudaSuccess) return fail(fn, "select the device", guard.err);
    cudaGetLastError();  // a stale launch error of an earlier call is not this call's
    cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
    if (n == 0) {  // nothing to check or update: only count the step (and report), without waiting for it
      if (workspace_bytes < static_cast<int64_t>(sizeof(Info))) return fail_arg(fn, "no workspace for the flag");
      Info* info = static_cast<Info*>(workspace);
      cudaError_t err = cudaMemsetAsync(info, 0xff, kInfoHostBytes, stream);
      if (err != cudaSuccess) return fail(fn, "clear the flag", err);
      if (adam_global) global_step_kernel<<<1, 1, 0, stream>>>(steps, params, info);
      if ((err = cudaGetLastError()) != cudaSuccess) return fail(fn, "global step kernel launch", err);
      if (flags_out != nullptr) report_kernel<<<1, 1, 0, stream>>>(info, 0, flags_out);
      if ((err = cudaGetLastError()) != cudaSuccess) return fail(fn, "report kernel launch", err);
      return 0;
    }
    char* ws = static_cast<char*>(workspace);
    const StepCall c{kind,   static_cast<int>(n), ids,   grads,       dim,      num_rows, mean,  table, table_dtype,
                     round_seed, state0, state1, steps, global_step, row_norm, finite, params, flags_out};
    return small_keys(num_rows) ? sparse_step_impl<uint32_t>(fn, c, stream, ws, workspace_bytes, bad_pos)
                                : sparse_step_impl<uint64_t>(fn, c, stream, ws, workspace_bytes, bad_pos);
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
    if (!batch_fits(n)) return fail_arg(fn, "a batch of " + std::to_string(n) + " ids (at most " + std::to_string(kMaxBatch) + ")");
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

// CUDA build of the sparse-optimizer core, from the same math header as the CPU build.
//
// Step: (1) validate every id (one atomicMin of the first bad position) before touching anything;
// (2) stable sort (id, position) pairs, so each id's duplicates keep batch order and sums are
// deterministic; (3) reduce_by_key for unique ids and segment lengths, exclusive scan for offsets;
// (4) segmented reduction: one block per unique id sums (or averages) its gradient rows into a
// workspace; (5) fused update: one block per unique row updates state and row with the element
// primitives of optim_math.h (a block reduction gives row-wise Adagrad's mean of g'^2; thread 0 bumps
// Adam's per-row step). Gather and overwrite (last position wins) use the same sort.
// All pointers are device pointers; work runs on the caller's stream. Built with nvcc when
// GRAPHTRAIN_BUILD_CUDA=1 and compiled for sm_80 and sm_90 in CI (no GPU runs it there).

#include "graphtrain/abi.h"
#include "graphtrain/api.h"
#include "graphtrain/optim_math.h"

#include <cuda_runtime.h>
#include <thrust/device_ptr.h>
#include <thrust/device_vector.h>
#include <thrust/execution_policy.h>
#include <thrust/iterator/constant_iterator.h>
#include <thrust/reduce.h>
#include <thrust/scan.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>

#include <cstdint>

using graphtrain::AdamCoef;
using graphtrain::OptimParams;

namespace {

constexpr int kThreads = 128;

__global__ void first_bad_kernel(int64_t n, const int64_t* ids, int64_t num_rows, unsigned long long* bad) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    if (ids[i] < 0 || ids[i] >= num_rows) atomicMin(bad, static_cast<unsigned long long>(i));
}

__global__ void reduce_kernel(int64_t n_unique, const int64_t* offsets, const int64_t* counts, const int64_t* pos,
                              const float* grads, int64_t dim, int mean, float* out) {
  for (int64_t s = blockIdx.x; s < n_unique; s += gridDim.x) {
    const int64_t begin = offsets[s], count = counts[s];
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
      float acc = 0.0f;
      for (int64_t k = 0; k < count; ++k) acc += grads[pos[begin + k] * dim + j];
      out[s * dim + j] = mean ? acc / static_cast<float>(count) : acc;
    }
  }
}

__device__ float block_sum(float x) {
  __shared__ float partial[kThreads / 32];
  for (int off = 16; off > 0; off >>= 1) x += __shfl_down_sync(0xffffffffu, x, off);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = x;
  __syncthreads();
  float total = 0.0f;
  if (threadIdx.x == 0)
    for (int w = 0; w < (blockDim.x + 31) / 32; ++w) total += partial[w];
  __syncthreads();
  return total;  // valid in thread 0 only
}

__global__ void update_kernel(int32_t kind, int64_t n_unique, const int64_t* rows, const float* g, int64_t dim,
                              float* table, float* s0, float* s1, int64_t* row_steps, AdamCoef global_coef,
                              OptimParams p) {
  __shared__ float shared_scale;
  __shared__ AdamCoef shared_coef;
  for (int64_t s = blockIdx.x; s < n_unique; s += gridDim.x) {
    const int64_t r = rows[s];
    float* w = table + r * dim;
    const float* gr = g + s * dim;
    switch (kind) {
      case graphtrain::kSGD:
        for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
          graphtrain::sgd_elem(w[j], graphtrain::decayed(gr[j], w[j], p.weight_decay), p);
        break;
      case graphtrain::kAdagrad:
        for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
          graphtrain::adagrad_elem(w[j], s0[r * dim + j], graphtrain::decayed(gr[j], w[j], p.weight_decay), p);
        break;
      case graphtrain::kRowwiseAdagrad: {
        float sq = 0.0f;
        for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
          const float gj = graphtrain::decayed(gr[j], w[j], p.weight_decay);
          sq += gj * gj;
        }
        const float total = block_sum(sq);
        if (threadIdx.x == 0) {
          s0[r] = graphtrain::rowwise_accumulate(s0[r], total, dim);
          shared_scale = graphtrain::rowwise_scale(s0[r], p);
        }
        __syncthreads();
        for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
          graphtrain::rowwise_elem(w[j], graphtrain::decayed(gr[j], w[j], p.weight_decay), shared_scale);
        break;
      }
      case graphtrain::kAdam: {
        if (threadIdx.x == 0) shared_coef = row_steps ? graphtrain::adam_coef(++row_steps[r], p) : global_coef;
        __syncthreads();
        const AdamCoef c = shared_coef;
        for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
          graphtrain::adam_elem(w[j], s0[r * dim + j], s1[r * dim + j],
                                graphtrain::decayed(gr[j], w[j], p.weight_decay), p, c);
        break;
      }
      default:
        break;
    }
    __syncthreads();
  }
}

__global__ void copy_rows_kernel(int64_t n, const int64_t* dst_rows, const int64_t* src_rows, const float* src,
                                 float* dst, int64_t dim) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int64_t d = dst_rows ? dst_rows[i] : i, sidx = src_rows ? src_rows[i] : i;
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) dst[d * dim + j] = src[sidx * dim + j];
  }
}

int grid_for(int64_t n) { return static_cast<int>(n < 65535 ? (n > 0 ? n : 1) : 65535); }

// Returns the first bad position or -1.
int64_t validate(int64_t n, const int64_t* ids, int64_t num_rows, cudaStream_t stream) {
  if (n == 0) return -1;
  thrust::device_vector<unsigned long long> bad(1, static_cast<unsigned long long>(n));
  first_bad_kernel<<<grid_for((n + 255) / 256), 256, 0, stream>>>(n, ids, num_rows, thrust::raw_pointer_cast(bad.data()));
  unsigned long long host = 0;
  cudaMemcpyAsync(&host, thrust::raw_pointer_cast(bad.data()), sizeof(host), cudaMemcpyDeviceToHost, stream);
  cudaStreamSynchronize(stream);
  return host == static_cast<unsigned long long>(n) ? -1 : static_cast<int64_t>(host);
}

// Sorted duplicates: unique ids, per-unique count and offset, and positions in sorted order.
struct Segments {
  thrust::device_vector<int64_t> keys, pos, uids, counts, offsets;
  int64_t n_unique = 0;
};

void segment(int64_t n, const int64_t* ids, cudaStream_t stream, Segments& sg) {
  auto policy = thrust::cuda::par.on(stream);
  sg.keys.assign(thrust::device_pointer_cast(ids), thrust::device_pointer_cast(ids) + n);
  sg.pos.resize(n);
  thrust::sequence(policy, sg.pos.begin(), sg.pos.end());
  thrust::stable_sort_by_key(policy, sg.keys.begin(), sg.keys.end(), sg.pos.begin());
  sg.uids.resize(n);
  sg.counts.resize(n);
  auto ends = thrust::reduce_by_key(policy, sg.keys.begin(), sg.keys.end(), thrust::constant_iterator<int64_t>(1),
                                    sg.uids.begin(), sg.counts.begin());
  sg.n_unique = ends.first - sg.uids.begin();
  sg.offsets.resize(sg.n_unique);
  thrust::exclusive_scan(policy, sg.counts.begin(), sg.counts.begin() + sg.n_unique, sg.offsets.begin());
}

}  // namespace

GT_DEFINE_ABI_EXPORTS()

GT_API int64_t gt_cuda_sparse_step(int32_t kind, int64_t n, const int64_t* ids, const float* grads, int64_t dim,
                                   int64_t num_rows, int32_t mean, float* table, float* state0, float* state1,
                                   int64_t* row_steps, int64_t global_step, OptimParams params, void* stream_ptr,
                                   int64_t* bad_pos) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  const int64_t bad = validate(n, ids, num_rows, stream);
  if (bad >= 0) {
    *bad_pos = bad;
    return -1;
  }
  if (n == 0) return 0;
  Segments sg;
  segment(n, ids, stream, sg);
  thrust::device_vector<float> reduced(sg.n_unique * dim);
  const int grid = grid_for(sg.n_unique);
  reduce_kernel<<<grid, kThreads, 0, stream>>>(sg.n_unique, thrust::raw_pointer_cast(sg.offsets.data()),
                                               thrust::raw_pointer_cast(sg.counts.data()),
                                               thrust::raw_pointer_cast(sg.pos.data()), grads, dim, mean,
                                               thrust::raw_pointer_cast(reduced.data()));
  const AdamCoef coef = kind == graphtrain::kAdam && !row_steps ? graphtrain::adam_coef(global_step, params)
                                                               : AdamCoef{0, 0, 0};
  update_kernel<<<grid, kThreads, 0, stream>>>(kind, sg.n_unique, thrust::raw_pointer_cast(sg.uids.data()),
                                               thrust::raw_pointer_cast(reduced.data()), dim, table, state0, state1,
                                               row_steps, coef, params);
  cudaStreamSynchronize(stream);
  return cudaGetLastError() == cudaSuccess ? sg.n_unique : -2;
}

GT_API int gt_cuda_gather(int64_t n, const int64_t* ids, const float* table, int64_t dim, int64_t num_rows, float* out,
                          void* stream_ptr, int64_t* bad_pos) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  const int64_t bad = validate(n, ids, num_rows, stream);
  if (bad >= 0) {
    *bad_pos = bad;
    return -1;
  }
  if (n > 0) copy_rows_kernel<<<grid_for(n), kThreads, 0, stream>>>(n, nullptr, ids, table, out, dim);
  cudaStreamSynchronize(stream);
  return cudaGetLastError() == cudaSuccess ? 0 : -2;
}

// table[ids[i]] = values[i]; the last position of a duplicated id wins (stable sort keeps batch order).
GT_API int gt_cuda_scatter(int64_t n, const int64_t* ids, const float* values, float* table, int64_t dim,
                           int64_t num_rows, void* stream_ptr, int64_t* bad_pos) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  const int64_t bad = validate(n, ids, num_rows, stream);
  if (bad >= 0) {
    *bad_pos = bad;
    return -1;
  }
  if (n == 0) return 0;
  Segments sg;
  segment(n, ids, stream, sg);
  // Position of the last occurrence of each unique id: offset + count - 1 in the sorted positions.
  thrust::device_vector<int64_t> last(sg.n_unique);
  auto policy = thrust::cuda::par.on(stream);
  const int64_t* offsets = thrust::raw_pointer_cast(sg.offsets.data());
  const int64_t* counts = thrust::raw_pointer_cast(sg.counts.data());
  const int64_t* pos = thrust::raw_pointer_cast(sg.pos.data());
  thrust::transform(policy, thrust::counting_iterator<int64_t>(0), thrust::counting_iterator<int64_t>(sg.n_unique),
                    last.begin(), [=] __device__(int64_t s) { return pos[offsets[s] + counts[s] - 1]; });
  copy_rows_kernel<<<grid_for(sg.n_unique), kThreads, 0, stream>>>(sg.n_unique, thrust::raw_pointer_cast(sg.uids.data()),
                                                                   thrust::raw_pointer_cast(last.data()), values,
                                                                   table, dim);
  cudaStreamSynchronize(stream);
  return cudaGetLastError() == cudaSuccess ? 0 : -2;
}

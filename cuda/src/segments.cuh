// Stages 1-3 and the last of every call that sorts a batch (a step, a scatter): the range check and sort keys,
// CUB's stable radix sort, the segment heads of each unique id, the workspace they are carved from, and
// the one copy to the host with its synchronisation. The flag and count live in `Info` on the device.
// Included by optim_cuda.cu and (for its constants and launch shapes) sampling_cuda.cu.
#pragma once

#include "graphtrain/optim_math.h"

#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace graphtrain::cuda_core {

constexpr int kWarp = 32;
constexpr int kBlock = 256;  // 8 warps, one row each
constexpr int kMaxBlocks = 1 << 16;
constexpr unsigned kFull = 0xffffffffu;
constexpr unsigned long long kNoBad = ~0ull;
constexpr size_t kAlign = 256;

// The device-side flag and count, copied to the host in one piece at the end of a call.
struct Info {
  unsigned long long bad;        // first position of an out-of-range id, or kNoBad
  unsigned long long nonfinite;  // first gradient row holding NaN or infinity (when asked), or kNoBad
  int num_unique;                // written by the select
  int num_chunks;                // chunks of long segments (plan_kernel), zeroed by prepare_kernel
  AdamCoef global_coef;          // Adam with one step count per table: this step's coefficients
};
// What is cleared before a call (the flags, the counts for tidiness) and copied back after it.
constexpr size_t kInfoHostBytes = offsetof(Info, global_coef);

// Kernels of one stream run in order: a kernel sees the flags as the earlier ones left them.
__device__ __forceinline__ bool flagged(const Info* info) {
  return info->bad != kNoBad || info->nonfinite != kNoBad;
}

template <typename Key>
__global__ void prepare_kernel(int n, const int64_t* ids, int64_t num_rows, Key* keys, int* pos, Info* info) {
  if (blockIdx.x == 0 && threadIdx.x == 0) info->num_chunks = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t id = ids[i];
    if (id < 0 || id >= num_rows) atomicMin(&info->bad, static_cast<unsigned long long>(i));
    keys[i] = static_cast<Key>(id);
    pos[i] = static_cast<int>(i);
  }
}

// Is sorted position j the first of its id?
template <typename Key>
struct SegmentHead {
  const Key* keys;
  __device__ __forceinline__ bool operator()(int j) const { return j == 0 || keys[j] != keys[j - 1]; }
};


inline int blocks_for_warps(int64_t warps) {
  const int64_t blocks = (warps + kBlock / kWarp - 1) / (kBlock / kWarp);
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(blocks, kMaxBlocks)));
}

inline int blocks_for_threads(int64_t threads) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((threads + kBlock - 1) / kBlock, kMaxBlocks)));
}

// Bits a sort key needs for ids in [0, num_rows).
inline int key_bits(int64_t num_rows) {
  if (num_rows <= 1) return 1;
  int bits = 1;
  while (bits < 64 && (static_cast<uint64_t>(num_rows - 1) >> bits) != 0) ++bits;
  return bits;
}

inline size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// The sorted-segment workspace of a step or a scatter, carved from the caller's bytes.
template <typename Key>
struct Segments {
  Info* info = nullptr;
  Key *keys_in = nullptr, *keys = nullptr;
  int *pos_in = nullptr, *pos = nullptr, *starts = nullptr;
  int2* chunks = nullptr;    // long segments' chunks: {first position, end}, a segment's in order
  float* partials = nullptr;  // their sums, one row per chunk, in the same order
  int* first_chunk = nullptr;  // per segment: its first chunk (long segments only; pos_in's space)
  int max_chunks = 0;
  void* temp = nullptr;
  size_t temp_bytes = 0;
};

// Segments longer than kDirect positions are summed by chunk_kernel, in chunks of kSumChunk positions
// (one chunk up to kSumChunk); shorter ones by the update kernel itself, row by row.
constexpr int kDirect = 16;

// Chunks a batch of n can have: at most n / (kDirect + 1) segments are long, and each has at most
// len / kSumChunk + 1 chunks. Zero where no segment can be long.
inline int max_chunks_for(int n) {
  if (n <= kDirect) return 0;
  return static_cast<int>(static_cast<int64_t>(n) / (kDirect + 1) + n / graphtrain::kSumChunk + 1);
}

// The CUB temporary storage a batch of n needs (the larger of the sort's and the select's). CUB only
// looks up the device's properties here: no allocation, no synchronisation.
template <typename Key>
cudaError_t temp_bytes_for(int n, int bits, size_t* bytes) {
  size_t sort = 0, select = 0;
  cudaError_t err = cub::DeviceRadixSort::SortPairs(nullptr, sort, static_cast<const Key*>(nullptr),
                                                    static_cast<Key*>(nullptr), static_cast<const int*>(nullptr),
                                                    static_cast<int*>(nullptr), n, 0, bits);
  if (err != cudaSuccess) return err;
  err = cub::DeviceSelect::If(nullptr, select, thrust::counting_iterator<int>(0), static_cast<int*>(nullptr),
                              static_cast<int*>(nullptr), n, SegmentHead<Key>{nullptr});
  *bytes = std::max(sort, select);
  return err;
}

template <typename Key>
size_t segment_layout(int n, int64_t dim, size_t temp_bytes, char* base, Segments<Key>* sg) {
  size_t off = 0;
  auto take = [&](size_t bytes) {
    char* p = base ? base + off : nullptr;
    off += aligned(bytes);
    return p;
  };
  sg->info = reinterpret_cast<Info*>(take(sizeof(Info)));
  sg->keys_in = reinterpret_cast<Key*>(take(sizeof(Key) * n));
  sg->keys = reinterpret_cast<Key*>(take(sizeof(Key) * n));
  sg->pos_in = reinterpret_cast<int*>(take(sizeof(int) * n));
  sg->pos = reinterpret_cast<int*>(take(sizeof(int) * n));
  sg->starts = reinterpret_cast<int*>(take(sizeof(int) * n));
  sg->first_chunk = sg->pos_in;  // free once the sort has run
  sg->max_chunks = dim > 0 ? max_chunks_for(n) : 0;  // dim 0: a scatter, which sums nothing
  sg->chunks = reinterpret_cast<int2*>(take(sizeof(int2) * sg->max_chunks));
  sg->partials = reinterpret_cast<float*>(take(sizeof(float) * static_cast<size_t>(sg->max_chunks) * dim));
  sg->temp = take(temp_bytes);
  sg->temp_bytes = temp_bytes;
  return off;
}

template <typename Key>
cudaError_t workspace_bytes_for(int n, int64_t num_rows, int64_t dim, size_t* bytes) {
  size_t temp = 0;
  const cudaError_t err = temp_bytes_for<Key>(n, key_bits(num_rows), &temp);
  if (err != cudaSuccess) return err;
  Segments<Key> sg;
  *bytes = segment_layout<Key>(n, dim, temp, nullptr, &sg);
  return cudaSuccess;
}

inline bool small_keys(int64_t num_rows) { return num_rows <= (int64_t{1} << 32); }

// Stages 1-3 on `stream`: the flag, sorted keys and positions, segment heads and their count.
// Returns the failed stage, or nullptr.
template <typename Key>
const char* segment(int n, const int64_t* ids, int64_t num_rows, int64_t dim, char* workspace,
                    int64_t workspace_bytes, cudaStream_t stream, Segments<Key>* sg, cudaError_t* err) {
  size_t temp = 0;
  if ((*err = temp_bytes_for<Key>(n, key_bits(num_rows), &temp)) != cudaSuccess) return "temporary storage size";
  const size_t need = segment_layout<Key>(n, dim, temp, workspace, sg);
  if (static_cast<int64_t>(need) > workspace_bytes) {
    *err = cudaErrorInvalidValue;
    return "workspace smaller than gt_cuda_workspace_bytes() asked for";
  }
  if ((*err = cudaMemsetAsync(sg->info, 0xff, kInfoHostBytes, stream)) != cudaSuccess)
    return "clear the flag";
  prepare_kernel<Key><<<blocks_for_threads(n), kBlock, 0, stream>>>(n, ids, num_rows, sg->keys_in, sg->pos_in,
                                                                     sg->info);
  if ((*err = cudaGetLastError()) != cudaSuccess) return "prepare kernel launch";
  if ((*err = cub::DeviceRadixSort::SortPairs(sg->temp, sg->temp_bytes, sg->keys_in, sg->keys, sg->pos_in, sg->pos,
                                              n, 0, key_bits(num_rows), stream)) != cudaSuccess)
    return "radix sort";
  if ((*err = cub::DeviceSelect::If(sg->temp, sg->temp_bytes, thrust::counting_iterator<int>(0), sg->starts,
                                    &sg->info->num_unique, n, SegmentHead<Key>{sg->keys}, stream)) != cudaSuccess)
    return "segment heads";
  return nullptr;
}

// This thread's pinned landing place for the flags and the count (a copy into pageable memory is staged
// by the driver), allocated once; null where pinned memory could not be had.
inline Info* pinned_info() {
  static thread_local Info* pinned = nullptr;
  static thread_local bool tried = false;
  if (!tried) {
    tried = true;
    void* p = nullptr;
    if (cudaMallocHost(&p, sizeof(Info)) == cudaSuccess) pinned = static_cast<Info*>(p);
    cudaGetLastError();  // a refused pinned allocation is not an error of the call
  }
  return pinned;
}

// The last stage: the one synchronisation of a call.
inline const char* finish(Info* info, cudaStream_t stream, Info* host, cudaError_t* err) {
  Info* land = pinned_info();
  if ((*err = cudaMemcpyAsync(land ? land : host, info, kInfoHostBytes, cudaMemcpyDeviceToHost, stream)) !=
      cudaSuccess)
    return "copy the flag and count to the host";
  if ((*err = cudaStreamSynchronize(stream)) != cudaSuccess) return "stream synchronisation";
  if (land) std::memcpy(static_cast<void*>(host), land, kInfoHostBytes);
  return nullptr;
}

}  // namespace graphtrain::cuda_core

// Neighbour sampling on the GPU: the draw of sampling.cpp's gt_sample_neighbors over a whole graph's in-CSR
// (a GPU trainer's copy: runtime/graph/device_sampler.py), from the same per-node streams and Floyd's picks
// (graphtrain/sample_math.h), so a GPU trainer's blocks are the host sampler's, edge for edge.
//
// A layer is two calls on the caller's stream, in a workspace the caller allocated:
//  1. gt_cuda_sample_count: each seed's count (its degree, or the fan-out when fewer), their inclusive
//     sums (CUB's scan: where each seed's sources end), then one copy of the total and the first bad
//     seed to the host and one stream synchronisation: the caller sizes the output with it;
//  2. gt_cuda_sample_fill: one warp per seed. A seed that keeps all its edges has them copied by the
//     lanes; otherwise lane 0 draws the positions into the seed's output slots (c <= fan-out of them),
//     and after the warp's barrier the lanes replace each position by its source. No host wait.
// gt_cuda_sample_edges_count/_fill are the same two stages by edge position (the CPU core's
// gt_sample_edges): a typed graph's sampled edge gives its source, its type and its id, and with a fan-out
// per edge type each relation of a node is drawn on its own (sample_math.h's edges_count/edges_draw).
// Errors cross the C ABI as codes and a message (cuda_boundary.cuh), never as exceptions.

#include "graphtrain/api.h"
#include "graphtrain/sample_math.h"
#include "cuda_boundary.cuh"
#include "segments.cuh"  // kWarp, kBlock, kNoBad, kAlign, blocks_for_warps/threads

#include <cuda_runtime.h>

#include <cub/device/device_scan.cuh>

#include <cstdint>
#include <string>

namespace {

using namespace graphtrain::cuda_core;

// counts[i]: the edges seed i keeps (sample_math.h's edges_count: the whole row, or with type_fanouts
// per relation); a seed outside [0, num_nodes) sets *bad (the least such position) and keeps none.
__global__ void count_kernel(const int64_t* indptr, const int64_t* etype, int64_t num_nodes, const int64_t* seeds,
                             int64_t n, int64_t fanout, const int64_t* type_fanouts, int64_t num_types,
                             int64_t* counts, unsigned long long* bad) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t s = seeds[i];
    if (s < 0 || s >= num_nodes) {
      atomicMin(bad, static_cast<unsigned long long>(i));
      counts[i] = 0;
      continue;
    }
    counts[i] = graphtrain::edges_count(etype, indptr[s], indptr[s + 1], fanout, type_fanouts, num_types);
  }
}

// The sources of seed i go to out[ends[i] - counts[i], ends[i]). Every lane of a warp takes the same seed,
// so the branches and the barrier are warp-uniform.
__global__ void __launch_bounds__(kBlock)
    fill_kernel(const int64_t* indptr, const int64_t* indices, const int64_t* seeds, int64_t n, uint64_t seed,
                const int64_t* counts, const int64_t* ends, int64_t* out) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp; i < n; i += warps) {
    const int64_t s = seeds[i];
    const int64_t start = indptr[s], deg = indptr[s + 1] - start, c = counts[i];
    int64_t* dst = out + (ends[i] - c);
    if (c == deg) {
      for (int64_t k = lane; k < deg; k += kWarp) dst[k] = indices[start + k];
      continue;
    }
    if (lane == 0) graphtrain::draw_positions(seed, s, deg, c, dst);
    __syncwarp();  // lane 0's positions are visible to the warp
    for (int64_t k = lane; k < c; k += kWarp) dst[k] = indices[start + dst[k]];
  }
}

// gt_cuda_sample_edges_fill's kernel: the positions (in the graph's edge arrays) seed i keeps, to
// out[ends[i] - counts[i], ends[i]). The whole row (no type_fanouts) as fill_kernel shares it among the
// lanes; with a fan-out per edge type lane 0 walks the row's runs (edges_draw: the CPU core's loop).
__global__ void __launch_bounds__(kBlock)
    fill_edges_kernel(const int64_t* indptr, const int64_t* etype, const int64_t* seeds, int64_t n, int64_t fanout,
                      const int64_t* type_fanouts, int64_t num_types, uint64_t seed, const int64_t* counts,
                      const int64_t* ends, int64_t* out) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp; i < n; i += warps) {
    const int64_t s = seeds[i];
    const int64_t start = indptr[s], end = indptr[s + 1], c = counts[i];
    int64_t* dst = out + (ends[i] - c);
    if (type_fanouts != nullptr) {
      if (lane == 0) graphtrain::edges_draw(etype, start, end, s, fanout, type_fanouts, num_types, seed, dst);
      continue;
    }
    if (c == end - start) {
      for (int64_t k = lane; k < c; k += kWarp) dst[k] = start + k;
      continue;
    }
    if (lane == 0) graphtrain::draw_positions(seed, s, end - start, c, dst);
    __syncwarp();  // lane 0's positions are visible to the warp
    for (int64_t k = lane; k < c; k += kWarp) dst[k] += start;
  }
}

constexpr int64_t kMaxSeeds = INT32_MAX;  // CUB's scan counts items in an int

size_t scan_bytes(int n, cudaStream_t stream, cudaError_t* err) {
  size_t bytes = 0;
  *err = cub::DeviceScan::InclusiveSum(nullptr, bytes, static_cast<const int64_t*>(nullptr),
                                       static_cast<int64_t*>(nullptr), n, stream);
  return bytes;
}

// This thread's pinned landing place for a layer's flag and total, allocated once and freed when the
// thread ends (a loader thread lives one epoch). A copy into pageable memory returns only when it is
// done: two of them were two more host waits per layer. Null where pinned memory could not be had.
struct PinnedPair {
  unsigned long long* values = nullptr;
  bool tried = false;
  ~PinnedPair() {
    if (values != nullptr) cudaFreeHost(values);  // at process exit the runtime may be gone: ignored
  }
};

unsigned long long* pinned_pair() {
  static thread_local PinnedPair pair;
  if (!pair.tried) {
    pair.tried = true;
    void* p = nullptr;
    if (cudaMallocHost(&p, 2 * sizeof(unsigned long long)) == cudaSuccess)
      pair.values = static_cast<unsigned long long*>(p);
    cudaGetLastError();  // a refused pinned allocation is not an error of the call
  }
  return pair.values;
}

// Every exported call's frame: the seed count checked, nothing to do for none, the device selected for the
// body (and restored), stale errors cleared, and nothing thrown across the ABI.
template <typename Body>
int on_seeds(const char* fn, int64_t n, int32_t device, void* stream_ptr, Body body) {
  try {
    if (n < 0 || n > kMaxSeeds)
      return fail_arg(fn, std::to_string(n) + " seeds (at most " + std::to_string(kMaxSeeds) + ")");
    if (n == 0) return 0;
    DeviceGuard guard(device);
    if (guard.err != cudaSuccess) return fail(fn, "select the device", guard.err);
    cudaGetLastError();
    return body(static_cast<cudaStream_t>(stream_ptr));
  } catch (...) {
    return fail_exception(fn);
  }
}

// Per-type fan-outs need the edge types and a count of them (kBadArgument, before any CUDA call); 0 when
// the arguments hold. Nothing thrown across the ABI.
int check_types(const char* fn, const int64_t* etype, const int64_t* type_fanouts, int64_t num_types) {
  try {
    if (type_fanouts != nullptr && (etype == nullptr || num_types < 0))
      return fail_arg(fn, "fan-outs per edge type need the edge types and their count");
    return 0;
  } catch (...) {
    return fail_exception(fn);
  }
}

// Stage 1 of a layer, both kinds (etype and type_fanouts null: neighbours; else edges per relation):
// counts[i] and ends[i] (device, n each), *total (host) the edges the layer keeps. Returns 0; kBadId with
// *bad_pos the first seed outside the graph (counts and ends are then not to be used); kCudaError or
// kBadArgument.
int count_layer(const char* fn, const int64_t* indptr, const int64_t* etype, int64_t num_nodes, const int64_t* seeds,
                int64_t n, int64_t fanout, const int64_t* type_fanouts, int64_t num_types, int64_t* counts,
                int64_t* ends, int32_t device, void* stream_ptr, void* workspace, int64_t workspace_bytes,
                int64_t* total, int64_t* bad_pos) {
  *total = 0;
  *bad_pos = -1;
  if (const int rc = check_types(fn, etype, type_fanouts, num_types)) return rc;
  return on_seeds(fn, n, device, stream_ptr, [&](cudaStream_t stream) {
    cudaError_t err = cudaSuccess;
    size_t scan = scan_bytes(static_cast<int>(n), stream, &err);
    if (err != cudaSuccess) return fail(fn, "CUB temporary storage size", err);
    if (workspace_bytes < static_cast<int64_t>(kAlign + scan))
      return fail_arg(fn, "a workspace of " + std::to_string(workspace_bytes) + " bytes (" +
                              std::to_string(kAlign + scan) + " needed)");
    auto* bad = static_cast<unsigned long long*>(workspace);
    void* temp = static_cast<char*>(workspace) + kAlign;
    if ((err = cudaMemsetAsync(bad, 0xff, sizeof(unsigned long long), stream)) != cudaSuccess)
      return fail(fn, "clear the flag", err);
    count_kernel<<<blocks_for_threads(n), kBlock, 0, stream>>>(indptr, etype, num_nodes, seeds, n, fanout,
                                                               type_fanouts, num_types, counts, bad);
    if ((err = cudaGetLastError()) != cudaSuccess) return fail(fn, "count kernel launch", err);
    if ((err = cub::DeviceScan::InclusiveSum(temp, scan, counts, ends, static_cast<int>(n), stream)) != cudaSuccess)
      return fail(fn, "inclusive sum of the counts", err);
    unsigned long long host[2] = {kNoBad, 0};
    unsigned long long* land = pinned_pair();
    unsigned long long* into = land ? land : host;
    if ((err = cudaMemcpyAsync(&into[0], bad, sizeof(host[0]), cudaMemcpyDeviceToHost, stream)) != cudaSuccess ||
        (err = cudaMemcpyAsync(&into[1], ends + n - 1, sizeof(host[1]), cudaMemcpyDeviceToHost, stream)) != cudaSuccess)
      return fail(fn, "copy the total to the host", err);
    if ((err = cudaStreamSynchronize(stream)) != cudaSuccess) return fail(fn, "wait for the counts", err);
    if (land) {
      host[0] = land[0];
      host[1] = land[1];
    }
    if (host[0] != kNoBad) {
      *bad_pos = static_cast<int64_t>(host[0]);
      return kBadId;
    }
    *total = static_cast<int64_t>(host[1]);
    return 0;
  });
}

}  // namespace

// Bytes of device workspace gt_cuda_sample_count needs for n seeds on `device`, in *bytes.
GT_API int gt_cuda_sample_workspace_bytes(int64_t n, int32_t device, int64_t* bytes) {
  const char* fn = "gt_cuda_sample_workspace_bytes";
  *bytes = static_cast<int64_t>(kAlign);
  return on_seeds(fn, n, device, nullptr, [&](cudaStream_t) {
    cudaError_t err = cudaSuccess;
    const size_t scan = scan_bytes(static_cast<int>(n), nullptr, &err);
    if (err != cudaSuccess) return fail(fn, "CUB temporary storage size", err);
    *bytes = static_cast<int64_t>(kAlign + scan);
    return 0;
  });
}

// Stage 1 of a layer: counts[i] and ends[i] (device, n each) for the n seeds of a graph of num_nodes nodes,
// *total (host) the sources the layer keeps. Returns 0; kBadId with *bad_pos the first seed outside the
// graph (counts and ends are then not to be used); kCudaError or kBadArgument.
GT_API int gt_cuda_sample_count(const int64_t* indptr, int64_t num_nodes, const int64_t* seeds, int64_t n,
                                int64_t fanout, int64_t* counts, int64_t* ends, int32_t device, void* stream_ptr,
                                void* workspace, int64_t workspace_bytes, int64_t* total, int64_t* bad_pos) {
  return count_layer("gt_cuda_sample_count", indptr, nullptr, num_nodes, seeds, n, fanout, nullptr, 0, counts, ends,
                     device, stream_ptr, workspace, workspace_bytes, total, bad_pos);
}

// Stage 1 by edge position (gt_sample_edges' draws): as gt_cuda_sample_count, counting per relation with
// type_fanouts (device, num_types entries: -1 all, 0 none; null: `fanout` over the whole row), each
// node's in-edges listed by type in etype (device; may be null without type_fanouts).
GT_API int gt_cuda_sample_edges_count(const int64_t* indptr, const int64_t* etype, int64_t num_nodes,
                                      const int64_t* seeds, int64_t n, int64_t fanout, const int64_t* type_fanouts,
                                      int64_t num_types, int64_t* counts, int64_t* ends, int32_t device,
                                      void* stream_ptr, void* workspace, int64_t workspace_bytes, int64_t* total,
                                      int64_t* bad_pos) {
  const char* fn = "gt_cuda_sample_edges_count";
  return count_layer(fn, indptr, etype, num_nodes, seeds, n, fanout, type_fanouts, num_types, counts, ends, device,
                     stream_ptr, workspace, workspace_bytes, total, bad_pos);
}

// Stage 2: the sources of every seed into out (device, the total of stage 1), drawn with request seed
// `seed`; counts and ends are stage 1's. Queued on the stream; returns 0, kCudaError or kBadArgument.
GT_API int gt_cuda_sample_fill(const int64_t* indptr, const int64_t* indices, const int64_t* seeds, int64_t n,
                               uint64_t seed, const int64_t* counts, const int64_t* ends, int64_t* out,
                               int32_t device, void* stream_ptr) {
  const char* fn = "gt_cuda_sample_fill";
  return on_seeds(fn, n, device, stream_ptr, [&](cudaStream_t stream) {
    fill_kernel<<<blocks_for_warps(n), kBlock, 0, stream>>>(indptr, indices, seeds, n, seed, counts, ends, out);
    const cudaError_t err = cudaGetLastError();
    return err != cudaSuccess ? fail(fn, "fill kernel launch", err) : 0;
  });
}

// Stage 2 by edge position: the positions (in the graph's edge arrays) every seed keeps into out (device,
// stage 1's total), drawn with request seed `seed`; the arguments as gt_cuda_sample_edges_count's.
// Queued on the stream; returns 0, kCudaError or kBadArgument.
GT_API int gt_cuda_sample_edges_fill(const int64_t* indptr, const int64_t* etype, const int64_t* seeds, int64_t n,
                                     int64_t fanout, const int64_t* type_fanouts, int64_t num_types, uint64_t seed,
                                     const int64_t* counts, const int64_t* ends, int64_t* out, int32_t device,
                                     void* stream_ptr) {
  const char* fn = "gt_cuda_sample_edges_fill";
  if (const int rc = check_types(fn, etype, type_fanouts, num_types)) return rc;
  return on_seeds(fn, n, device, stream_ptr, [&](cudaStream_t stream) {
    fill_edges_kernel<<<blocks_for_warps(n), kBlock, 0, stream>>>(indptr, etype, seeds, n, fanout, type_fanouts,
                                                                  num_types, seed, counts, ends, out);
    const cudaError_t err = cudaGetLastError();
    return err != cudaSuccess ? fail(fn, "fill kernel launch", err) : 0;
  });
}

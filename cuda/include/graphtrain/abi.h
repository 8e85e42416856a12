// The version of the native core's C ABI, reported by every build of the core (CPU and CUDA) and
// checked by the Python bindings when they load a library (runtime/native/abi.py, which holds the same
// number; tests/native/test_abi.py compares the two). A library built from older sources is then
// refused with a message to rebuild it, instead of reading hyper-parameters from a struct whose layout
// moved. Bump kAbiVersion whenever an exported function's signature or OptimParams changes.
#pragma once

#include <cstdint>

#include "graphtrain/api.h"
#include "graphtrain/optim_math.h"

namespace graphtrain {
// 1: gt_version(), before the load-time check; 2: OptimParams' exact betas; 3: the CUDA core's error codes,
// probe, caller's workspace and device; 4: the CUDA step's row norm and finite check, the workspace's dim;
// 5: the dynamic vocabularies' key map (gt_keymap_*); 6: the CUDA core's neighbour sampling (gt_cuda_sample_*);
// 7: sampling by edge position and per edge type (gt_sample_edges), attention sums (gt_attention_*), ELU + dropout (gt_elu_dropout*)
// 8: the edge softmax over a block's rows (gt_edge_softmax*); 9: the CUDA core's sampling by edge position and
// per edge type (gt_cuda_sample_edges_*); 10: half-precision tables in the CPU core's sparse steps (table_dtype,
// round_seed); 11: the shard server's fast lane (gt_fast_*); 12: half-precision tables in the CUDA core's
// sparse step (gt_cuda_sparse_step's table_dtype, round_seed); 13: gradient pushes on the fast lane, the
// shard tables' native lock (gt_lock_*, gt_fast_set_table's lock); 14: the fast lane's batches (wire version 2,
// gt_fast_stats' batches counter); 15: attention sums over two inputs sharing the output (z2, width2), the transpose's row stride (ld);
// 16: thin products of attention scores (gt_thin_product, gt_thin_product_grad); 17: OptimParams' row_norm
// (the CPU core's update loop scales float32 rows to it); 20: the fast lane's pushes from shared memory
// (gt_fast_set_segments, wire version 3)
inline constexpr int32_t kAbiVersion = 20;
}  // namespace graphtrain

// The two functions of the check, defined once in each library (one use per build).
#define GT_DEFINE_ABI_EXPORTS()                                                   \
  GT_API int32_t gt_abi_version() { return graphtrain::kAbiVersion; }             \
  GT_API int64_t gt_optim_params_size() {                                         \
    return static_cast<int64_t>(sizeof(graphtrain::OptimParams));                 \
  }

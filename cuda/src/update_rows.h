// The CPU core's update loop (phase 3 of optim_cpu.cpp's fused step): each owned row updated by the
// optimizer math of graphtrain/optim_math.h, per row width and table type, cloned per target. Included
// by optim_cpu.cpp only, inside its anonymous namespace (as update_kernels.cuh is by optim_cuda.cu).
#pragma once

// One row's update by the optimizer math: row `src` (a float32 row, or a bfloat16 one widened as it is
// read; table type td) updated into the float32 row `w` (for a float32 table, `src` itself).
template <typename S>
__attribute__((always_inline)) inline void update_row(int32_t kind, float* w, const S* src, int32_t td, const float* g,
                                                      int64_t r, int64_t dim, float* state0, float* state1,
                                                      int64_t* row_steps, const AdamCoef& global_coef,
                                                      const OptimParams& p) {
  switch (kind) {
    case graphtrain::kSGD:
      graphtrain::sgd_row(w, src, td, g, dim, p);
      break;
    case graphtrain::kAdagrad:
      graphtrain::adagrad_row(w, src, td, state0 + r * dim, g, dim, p);
      break;
    case graphtrain::kRowwiseAdagrad:
      graphtrain::rowwise_adagrad_row(w, src, td, state0 + r, g, dim, p);
      break;
    case graphtrain::kAdam: {
      const AdamCoef c = row_steps ? graphtrain::adam_coef(++row_steps[r], p) : global_coef;
      graphtrain::adam_row(w, src, td, state0 + r * dim, state1 + r * dim, g, dim, p, c);
      break;
    }
    default:
      break;
  }
}

// Scale the float32 row `w` to L2 norm `norm` (OptimParams::row_norm), just after its update. Eight
// partial sums, so the squares' sum vectorises (the sum's order differs from torch's norm in the last
// bits; the tests compare with a tolerance, as they do the CUDA core's warp sum).
template <int DIM>
__attribute__((always_inline)) inline void project_row(float* w, int64_t dim_rt, float norm) {
  const int64_t dim = DIM > 0 ? DIM : dim_rt;
  float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= dim; j += 8)
    for (int u = 0; u < 8; ++u) part[u] += w[j + u] * w[j + u];
  for (; j < dim; ++j) part[0] += w[j] * w[j];
  const float sum = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  if (!std::isfinite(sum)) {  // squares past float32 (a row beyond ~1.8e19): summed in double, not zeroed
    double wide = 0.0;
    for (int64_t k = 0; k < dim; ++k) wide += static_cast<double>(w[k]) * w[k];
    const double factor = static_cast<double>(norm) / std::sqrt(wide);
    for (int64_t k = 0; k < dim; ++k) w[k] = static_cast<float>(w[k] * factor);
    return;
  }
  const float scale = graphtrain::norm_scale(sum, norm);
  for (int64_t k = 0; k < dim; ++k) w[k] *= scale;
}

__attribute__((always_inline)) inline void prefetch_bytes(const void* at, int64_t bytes) {
  for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(static_cast<const char*>(at) + b, 1, 1);
}

// A half row into float32 and back (stochastically rounded): half_rows_avx512.h's loops in the AVX-512
// build of the update loop (apply_rows_avx512), optim_math.h's portable ones elsewhere.
template <int TD, bool AVX512>
__attribute__((always_inline)) inline void widen_half(float* x, const uint16_t* w, int64_t dim) {
  if constexpr (AVX512 && TD == graphtrain::kTableBFloat16)
    avx512::bf16_row_to_float(x, w, dim);
  else if constexpr (AVX512)
    avx512::fp16_row_to_float(x, w, dim);
  else if constexpr (TD == graphtrain::kTableBFloat16)  // not taken: widen_at reads a bfloat16 row
    for (int64_t j = 0; j < dim; ++j) x[j] = graphtrain::bf16_to_float(w[j]);
  else
    graphtrain::fp16_row_to_float(x, w, dim);
}

template <int TD, bool AVX512>
__attribute__((always_inline)) inline void round_half(uint16_t* w, const float* x, int64_t dim, uint32_t key) {
  if constexpr (AVX512 && TD == graphtrain::kTableBFloat16)
    avx512::bf16_row_round(w, x, dim, key);
  else if constexpr (AVX512)
    avx512::fp16_row_round(w, x, dim, key);
  else
    graphtrain::half_row_round(w, x, dim, key, TD);
}

// apply_rows_of for a float16 table on AVX-512, where avx512::fp16_fused_fits: each row widened, updated
// and rounded in one pass (half_update_avx512.h). A function of that target of its own, so that the row
// function is inlined into it: the update loop's AVX-512 instance is first built for the default target.
template <int DIM>
GT_AVX512 __attribute__((noinline)) void apply_fp16_fused(int32_t kind, int64_t count, const int64_t* rows,
                                                          const float* const* grads, int64_t dim_rt, uint16_t* table,
                                                          uint64_t round_seed, float* state0, float* row32,
                                                          const OptimParams& p) {
  const int64_t dim = DIM > 0 ? DIM : dim_rt;
  constexpr int kAhead = prefetch_rows(DIM);
  for (int64_t s = 0; s < count; ++s) {
    if (s + kAhead < count) {
      const int64_t ahead = rows[s + kAhead];
      prefetch_bytes(table + ahead * dim, dim * 2);
      if (kind == graphtrain::kAdagrad) prefetch_row(state0 + ahead * dim, dim);
      if (kind == graphtrain::kRowwiseAdagrad) __builtin_prefetch(state0 + ahead, 1, 1);
    }
    const int64_t r = rows[s];
    avx512::fp16_update_row<DIM>(kind, table + r * dim, row32, grads[s], dim, state0, r, p,
                                 graphtrain::round_key(round_seed, r));
  }
}

// The update loop for rows of DIM elements (DIM = 0: `dim`, known at run time only) of a table of
// TD (TableDtype): float32 rows are updated where they lie (and scaled to p.row_norm when it is set); a
// half row is read into float32, updated by the same math and written back with stochastic rounding
// (optim_math.h). Always inlined into apply_rows, so each of its target clones gets its own copy.
template <int DIM, int TD, bool AVX512>
__attribute__((always_inline)) inline void apply_rows_of(int32_t kind, int64_t count, const int64_t* rows,
                                                         const float* const* grads, int64_t dim_rt, void* table,
                                                         uint64_t round_seed, float* state0, float* state1,
                                                         int64_t* row_steps, const AdamCoef& global_coef,
                                                         const OptimParams& p) {
  const int64_t dim = DIM > 0 ? DIM : dim_rt;
  constexpr int kAhead = prefetch_rows(DIM);
  constexpr int64_t kElem = TD == graphtrain::kTableFloat32 ? 4 : 2;
  char* const base = static_cast<char*>(table);
  static thread_local std::vector<float> spill;  // the float32 row of a half table of a run-time width
  float fixed[DIM > 0 && TD != graphtrain::kTableFloat32 ? DIM : 1];
  float* row32 = fixed;
  if (TD != graphtrain::kTableFloat32 && DIM == 0) {
    if (static_cast<int64_t>(spill.size()) < dim) spill.resize(dim);
    row32 = spill.data();
  }
  if constexpr (AVX512 && TD == graphtrain::kTableFloat16) {
    if (avx512::fp16_fused_fits(kind, dim, p)) {  // widened, updated and rounded in one pass
      apply_fp16_fused<DIM>(kind, count, rows, grads, dim, static_cast<uint16_t*>(table), round_seed, state0, row32,
                            p);
      return;
    }
  }
  for (int64_t s = 0; s < count; ++s) {
    if (s + kAhead < count) {
      const int64_t ahead = rows[s + kAhead];
      prefetch_bytes(base + ahead * dim * kElem, dim * kElem);
      if (kind == graphtrain::kAdagrad || kind == graphtrain::kAdam) prefetch_row(state0 + ahead * dim, dim);
      if (kind == graphtrain::kRowwiseAdagrad) __builtin_prefetch(state0 + ahead, 1, 1);
      if (kind == graphtrain::kAdam) {
        prefetch_row(state1 + ahead * dim, dim);
        if (row_steps) __builtin_prefetch(row_steps + ahead, 1, 1);
      }
    }
    const int64_t r = rows[s];
    if constexpr (TD == graphtrain::kTableFloat32) {
      float* w = reinterpret_cast<float*>(base) + r * dim;
      update_row(kind, w, static_cast<const float*>(w), TD, grads[s], r, dim, state0, state1, row_steps, global_coef,
                 p);
      if (p.row_norm > 0.0f) project_row<DIM>(w, dim, p.row_norm);
    } else {
      uint16_t* w = reinterpret_cast<uint16_t*>(base) + r * dim;
      // a bfloat16 row is widened as the update reads it (a shift GCC folds into the loads); a float16
      // row is widened first (where apply_fp16_fused does not take it), and so is a bfloat16 one for Adam
      // on AVX-512, which GCC's loops run faster on a widened row there (17.4 against 18.9 ms per 100,000
      // rows of 128, 2 threads)
      if (TD == graphtrain::kTableBFloat16 && !(AVX512 && kind == graphtrain::kAdam)) {
        update_row(kind, row32, static_cast<const uint16_t*>(w), TD, grads[s], r, dim, state0, state1, row_steps,
                   global_coef, p);
      } else {
        widen_half<TD, AVX512>(row32, w, dim);
        update_row(kind, row32, static_cast<const float*>(row32), TD, grads[s], r, dim, state0, state1, row_steps,
                   global_coef, p);
      }
      round_half<TD, AVX512>(w, row32, dim, graphtrain::round_key(round_seed, r));
    }
  }
}

// Cloned for AVX-512 and AVX2 (picked at load time): the row loops of the optimizer math vectorise
// wider, row-wise and element-wise Adagrad 16.7 -> ~13.5 and 22.5 -> ~18 ms per 100,000 x 128 step on
// an AVX-512 Xeon; the baseline x86-64 build (SSE2) stays for other CPUs. Common row widths get a loop
// with the width fixed at compile time, as FBGEMM's kernels are generated per embedding dimension: the
// row becomes straight-line code, the core runs further ahead and keeps more rows in flight (row-wise
// Adagrad, 100,000 rows of 128: a bare loop 7.0 -> 5.4 ms, the whole step here 9.5 -> 8.0 ms).
template <int TD, bool AVX512 = false>
__attribute__((always_inline)) inline void apply_rows_typed(int32_t kind, int64_t count, const int64_t* rows,
                                                            const float* const* grads, int64_t dim, void* table,
                                                            uint64_t round_seed, float* state0, float* state1,
                                                            int64_t* row_steps, const AdamCoef& global_coef,
                                                            const OptimParams& p) {
#define GT_ROWS_OF(D)                                                                                      \
  apply_rows_of<D, TD, AVX512>(kind, count, rows, grads, dim, table, round_seed, state0, state1, row_steps, \
                               global_coef, p)
  switch (dim) {
    case 16:
      GT_ROWS_OF(16);
      break;
    case 32:
      GT_ROWS_OF(32);
      break;
    case 64:
      GT_ROWS_OF(64);
      break;
    case 128:
      GT_ROWS_OF(128);
      break;
    case 256:
      GT_ROWS_OF(256);
      break;
    default:
      GT_ROWS_OF(0);
  }
#undef GT_ROWS_OF
}

// The half tables' update loop with half_rows_avx512.h's loops, built for AVX-512 (not a clone: the
// intrinsics exist in that target only), taken when the CPU has it.
template <int TD>
GT_AVX512 __attribute__((noinline)) void apply_rows_avx512(int32_t kind, int64_t count, const int64_t* rows,
                                                           const float* const* grads, int64_t dim, void* table,
                                                           uint64_t round_seed, float* state0, float* state1,
                                                           int64_t* row_steps, const AdamCoef& global_coef,
                                                           const OptimParams& p) {
  apply_rows_typed<TD, true>(kind, count, rows, grads, dim, table, round_seed, state0, state1, row_steps, global_coef,
                             p);
}

GT_CLONES
void apply_rows(int32_t kind, int64_t count, const int64_t* rows, const float* const* grads, int64_t dim,
                void* table, int32_t table_dtype, uint64_t round_seed, float* state0, float* state1,
                int64_t* row_steps, int64_t global_step, const OptimParams& p) {
  const AdamCoef global_coef = kind == graphtrain::kAdam && !row_steps ? graphtrain::adam_coef(global_step, p)
                                                                      : AdamCoef{0, 0, 0};
  switch (table_dtype) {
    case graphtrain::kTableFloat16:
      if (avx512::supported())
        apply_rows_avx512<graphtrain::kTableFloat16>(kind, count, rows, grads, dim, table, round_seed, state0, state1,
                                                     row_steps, global_coef, p);
      else
        apply_rows_typed<graphtrain::kTableFloat16>(kind, count, rows, grads, dim, table, round_seed, state0, state1,
                                                    row_steps, global_coef, p);
      break;
    case graphtrain::kTableBFloat16:
      if (avx512::supported())
        apply_rows_avx512<graphtrain::kTableBFloat16>(kind, count, rows, grads, dim, table, round_seed, state0,
                                                      state1, row_steps, global_coef, p);
      else
        apply_rows_typed<graphtrain::kTableBFloat16>(kind, count, rows, grads, dim, table, round_seed, state0,
                                                     state1, row_steps, global_coef, p);
      break;
    default:
      apply_rows_typed<graphtrain::kTableFloat32>(kind, count, rows, grads, dim, table, round_seed, state0, state1,
                                                  row_steps, global_coef, p);
  }
}

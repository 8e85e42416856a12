// The update kernels of the CUDA core's sparse step (stages 3-5 of optim_cuda.cu's pipeline): the finite
// check, the chunk plan and chunk sums of ids seen more than kDirect times, and the fused reduce + update,
// with the row loads they share. Included by optim_cuda.cu only, inside its anonymous namespace.
#pragma once

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

// The sum over the `width` lanes of a group (width a power of two dividing 32), in every lane of it.
__device__ __forceinline__ float group_sum(float x, unsigned mask, int width) {
  for (int off = width / 2; off > 0; off >>= 1) x += __shfl_xor_sync(mask, x, off, width);
  return x;
}

// VEC columns of a table row starting at element `at`, as floats: a float32 table's as they are, a half
// table's (TD: graphtrain::TableDtype) widened, as the CPU core's update loop reads them (update_rows.h).
template <int VEC, int TD>
__device__ __forceinline__ void load_row(Vec<VEC>& x, const void* table, int64_t at) {
  if constexpr (TD == graphtrain::kTableFloat32) {
    x.load(static_cast<const float*>(table) + at);
  } else {
    const uint16_t* src = static_cast<const uint16_t*>(table) + at;
    uint16_t h[VEC];
    if constexpr (VEC == 4) {  // 8-byte aligned where a float32 row would be 16-byte aligned (vec4_ok)
      const uint2 v = *reinterpret_cast<const uint2*>(src);
      h[0] = static_cast<uint16_t>(v.x), h[1] = static_cast<uint16_t>(v.x >> 16);
      h[2] = static_cast<uint16_t>(v.y), h[3] = static_cast<uint16_t>(v.y >> 16);
    } else {
      for (int k = 0; k < VEC; ++k) h[k] = src[k];
    }
    for (int k = 0; k < VEC; ++k) x.v[k] = graphtrain::half_to_float(h[k], TD);
  }
}

// Store VEC columns [j, j + VEC) of a row at element `at`: a half table's rounded stochastically with the
// random bits of its row key and column (optim_math.h), the bits the CPU core draws for the same element.
template <int VEC, int TD>
__device__ __forceinline__ void store_row(const Vec<VEC>& x, void* table, int64_t at, uint32_t key, int64_t j) {
  if constexpr (TD == graphtrain::kTableFloat32) {
    (void)key, (void)j;
    x.store(static_cast<float*>(table) + at);
  } else {
    uint16_t h[VEC];
    for (int k = 0; k < VEC; ++k) h[k] = graphtrain::half_round(x.v[k], graphtrain::round_bits(key, j + k), TD);
    uint16_t* dst = static_cast<uint16_t*>(table) + at;
    if constexpr (VEC == 4) {
      *reinterpret_cast<uint2*>(dst) = make_uint2(h[0] | (static_cast<uint32_t>(h[1]) << 16),
                                                  h[2] | (static_cast<uint32_t>(h[3]) << 16));
    } else {
      for (int k = 0; k < VEC; ++k) dst[k] = h[k];
    }
  }
}

__device__ __forceinline__ int chunks_of(int len) {
  return (len + static_cast<int>(graphtrain::kSumChunk) - 1) / static_cast<int>(graphtrain::kSumChunk);
}

// Refuse the batch (the flag every later kernel reads) when a gradient element is NaN or infinite.
__global__ void finite_kernel(int64_t count, int64_t dim, const float* __restrict__ grads, Info* info) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    if (!isfinite(grads[i])) atomicMin(&info->nonfinite, static_cast<unsigned long long>(i / dim));
}

// The chunks of every long segment (more than kDirect positions), one thread per segment: a segment's
// chunks take consecutive places in the list (and in the partial rows), where it notes the first. Which
// segment gets which places varies from run to run; what each partial row holds does not.
__global__ void plan_kernel(int n, const int* starts, Info* info, int2* chunks, int* first_chunk) {
  if (flagged(info)) return;
  const int num_unique = info->num_unique;
  for (int64_t s = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; s < num_unique;
       s += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int begin = starts[s], end = s + 1 < num_unique ? starts[s + 1] : n;
    if (end - begin <= kDirect) continue;
    const int count = chunks_of(end - begin);
    const int at = atomicAdd(&info->num_chunks, count);
    first_chunk[s] = at;
    for (int c = 0; c < count; ++c) {
      const int a = begin + c * static_cast<int>(graphtrain::kSumChunk);
      chunks[at + c] = make_int2(a, min(end, a + static_cast<int>(graphtrain::kSumChunk)));
    }
  }
}

// Each chunk's gradient rows summed in batch order from its first row: one warp per (chunk, slab of
// 32 * VEC columns). The positions come 32 at a time in one coalesced load; eight rows are loaded before
// any is added, so the loads overlap while the additions keep their order.
template <int VEC>
__global__ void __launch_bounds__(kBlock)
    chunk_kernel(const int* pos, const Info* info, const int2* chunks, const float* __restrict__ grads, int64_t dim,
                 float* __restrict__ partials) {
  if (flagged(info)) return;
  const int lane = threadIdx.x % kWarp;
  const int64_t slabs = (dim + kWarp * VEC - 1) / (kWarp * VEC);
  const int64_t items = static_cast<int64_t>(info->num_chunks) * slabs;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t w = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp; w < items; w += warps) {
    const int2 ch = chunks[w / slabs];
    const int64_t j = (w % slabs) * kWarp * VEC + lane * VEC;
    const bool active = j < dim;
    Vec<VEC> acc;
    for (int e = 0; e < VEC; ++e) acc.v[e] = 0.0f;
    bool started = false;
    for (int k0 = ch.x; k0 < ch.y; k0 += kWarp) {
      const int mine = k0 + lane < ch.y ? pos[k0 + lane] : 0;
      const int m = min(kWarp, ch.y - k0);
      for (int t0 = 0; t0 < m; t0 += 8) {
        Vec<VEC> x[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
          const int p = __shfl_sync(kFull, mine, (t0 + u) & (kWarp - 1));
          if (active && t0 + u < m) x[u].load(grads + static_cast<int64_t>(p) * dim + j);
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) {
          if (!active || t0 + u >= m) continue;
          if (!started) {
            acc = x[u];
            started = true;
          } else {
            for (int e = 0; e < VEC; ++e) acc.v[e] += x[u].v[e];
          }
        }
      }
    }
    if (active) acc.store(partials + w / slabs * dim + j);
  }
}

// One unique row's metadata, as a group of lanes processes it.
struct Row {
  int begin, end;      // its positions in the sorted batch
  int64_t r;           // its table row
  const float* first;  // its first gradient row, or (a long segment) its first chunk's sum
};

// The reduced gradient of one row at columns [j, j + VEC): its gradient rows summed in the canonical
// order (optim_math.h), divided by the count for the mean rule. `g` holds w.first's columns on entry.
// A long segment's chunk sums are consecutive rows after w.first.
template <int VEC>
__device__ __forceinline__ void reduce_rest(Vec<VEC>& g, const Row& w, const int* pos,
                                            const float* __restrict__ grads, int64_t dim, int64_t j, int mean) {
  const int len = w.end - w.begin;
  if (len > kDirect) {
    const int count = chunks_of(len);
#pragma unroll 2
    for (int c = 1; c < count; ++c) {
      Vec<VEC> x;
      x.load(w.first + c * dim + j);
      for (int e = 0; e < VEC; ++e) g.v[e] += x.v[e];
    }
  } else {
#pragma unroll 2
    for (int k = w.begin + 1; k < w.end; ++k) {
      Vec<VEC> x;
      x.load(grads + static_cast<int64_t>(pos[k]) * dim + j);
      for (int e = 0; e < VEC; ++e) g.v[e] += x.v[e];
    }
  }
  if (mean && len > 1) {
    const float c = static_cast<float>(len);
    for (int e = 0; e < VEC; ++e) g.v[e] /= c;  // divide, as the CPU core and the reference do
  }
}

template <typename Key>
struct StepArgs {
  int n;
  const Key* keys;
  const int* pos;
  const int* starts;
  Info* info;
  const float* grads;
  const float* partials;
  const int* first_chunk;
  int64_t dim;
  int mean;
  int group;  // lanes per row: 32, or fewer for narrow rows (several rows per warp)
  void* table;  // float32 rows, or half ones (the kernel's TD)
  uint64_t round_seed;  // a half table's stochastic rounding: this step's seed (optim_math.h round_key)
  float* s0;
  float* s1;
  int64_t* row_steps;
  int global_step;
  float row_norm;  // > 0: scale each updated row to this L2 norm (TransE, DistMult); float32 tables only
  OptimParams p;
};

// Scale row `w` (columns [j, j + VEC) of this lane, kept in x when the row is one column step wide) to
// L2 norm a.row_norm, as runtime/optim/functional.project_rows does.
template <int VEC, int U, typename Key>
__device__ __forceinline__ void project(const StepArgs<Key>& a, const Row (&w)[U], const bool (&ok)[U],
                                        const float (&sq)[U], Vec<VEC> (&x)[U], bool one_step, int li,
                                        unsigned gmask) {
  float scale[U];
#pragma unroll
  for (int u = 0; u < U; ++u)
    scale[u] = a.row_norm / fmaxf(sqrtf(group_sum(sq[u], gmask, a.group)), 1e-12f);
  for (int64_t j = li * VEC; j < a.dim; j += a.group * VEC) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (!ok[u]) continue;
      float* row = static_cast<float*>(a.table) + w[u].r * a.dim + j;
      if (!one_step) x[u].load(row);
      for (int e = 0; e < VEC; ++e) x[u].v[e] *= scale[u];
      x[u].store(row);
    }
  }
}

// The fused reduce + update. A warp takes 32 unique rows at a time (their metadata in one load per
// lane), a group of `group` lanes one row, U rows of a group at once: the loads of U rows are in flight
// together, where one row at a time left each warp waiting on a chain of four dependent loads per row.
// At most 128 registers (two blocks per SM) without spilling; row-wise Adagrad, two rows per group, fits 85
// (three blocks). TD: the table's element type (graphtrain::TableDtype): a half row is read widened and
// written back with stochastic rounding, each row keyed by round_key(seed, row) as on the CPU.
template <typename Key, int VEC, int KIND, int U, int TD>
__global__ void __launch_bounds__(kBlock, KIND == graphtrain::kRowwiseAdagrad ? 3 : 2) step_kernel(StepArgs<Key> a) {
  if (flagged(a.info)) return;
  const int num_unique = a.info->num_unique;
  const int lane = threadIdx.x % kWarp;
  const int G = a.group, li = lane % G, grp = lane / G, per_pass = (kWarp / G) * U;
  const unsigned gmask = G == kWarp ? kFull : ((1u << G) - 1u) << (grp * G);
  const int64_t dim = a.dim;
  const float wd = a.p.weight_decay;
  const bool one_step = dim <= static_cast<int64_t>(G) * VEC;  // each lane holds one column step of a row
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t tile = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp * kWarp;
       tile < num_unique; tile += warps * kWarp) {
    int begin = 0, end = 0, first = 0;
    int64_t key = 0;
    if (tile + lane < num_unique) {
      const int64_t s = tile + lane;
      begin = a.starts[s];
      end = s + 1 < num_unique ? a.starts[s + 1] : a.n;
      key = static_cast<int64_t>(a.keys[begin]);
      first = end - begin > kDirect ? -1 - a.first_chunk[s] : a.pos[begin];
    }
    const int count = static_cast<int>((num_unique - tile < kWarp ? num_unique - tile : kWarp));
    for (int i = 0; i < count; i += per_pass) {
      Row w[U];
      bool ok[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {  // every lane shuffles (full mask); a group keeps its rows
        const int src = i + grp * U + u;
        ok[u] = src < count;
        w[u].begin = __shfl_sync(kFull, begin, src & (kWarp - 1));
        w[u].end = __shfl_sync(kFull, end, src & (kWarp - 1));
        w[u].r = __shfl_sync(kFull, key, src & (kWarp - 1));
        const int f = __shfl_sync(kFull, first, src & (kWarp - 1));
        w[u].first = f >= 0 ? a.grads + static_cast<int64_t>(f) * dim : a.partials + static_cast<int64_t>(-1 - f) * dim;
      }
      uint32_t key[U];  // a half table's rounding key of each row
#pragma unroll
      for (int u = 0; u < U; ++u) key[u] = TD == graphtrain::kTableFloat32 ? 0u : graphtrain::round_key(a.round_seed, w[u].r);
      AdamCoef coef[U];
      if constexpr (KIND == graphtrain::kAdam) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (a.global_step) {
            coef[u] = a.info->global_coef;
          } else if (ok[u]) {
            int64_t t = 0;
            if (li == 0) t = ++a.row_steps[w[u].r];
            t = __shfl_sync(gmask, t, 0, G);
            // lane 0 of the group: 1 - beta1^t, lane 1: 1 - beta2^t, at once; every lane then has both
            const double bc = graphtrain::adam_bias_correction(li == 1 ? a.p.beta2_exact : a.p.beta1_exact, t);
            coef[u] = graphtrain::adam_coef_from(__shfl_sync(gmask, bc, 0, G), __shfl_sync(gmask, bc, 1, G), a.p);
          }
        }
      }
      float sq[U];   // row-wise Adagrad: sum of g'^2; row_norm: sum of the new row's squares
      float rsc[U];  // row-wise Adagrad: the row's step scale
      Vec<VEC> keep[U], x[U];
#pragma unroll
      for (int u = 0; u < U; ++u) sq[u] = 0.0f;
      if constexpr (KIND == graphtrain::kRowwiseAdagrad) {
        float acc0[U];  // the rows' accumulators, loaded with the first columns rather than after the sums
#pragma unroll
        for (int u = 0; u < U; ++u)
          if (ok[u]) acc0[u] = a.s0[w[u].r];
        for (int64_t j = li * VEC; j < dim; j += G * VEC) {
#pragma unroll
          for (int u = 0; u < U; ++u)
            if (ok[u]) keep[u].load(w[u].first + j);
#pragma unroll
          for (int u = 0; u < U; ++u)
            if (ok[u] && wd != 0.0f) load_row<VEC, TD>(x[u], a.table, w[u].r * dim + j);
#pragma unroll
          for (int u = 0; u < U; ++u) {
            if (!ok[u]) continue;
            if (w[u].end - w[u].begin > 1) reduce_rest<VEC>(keep[u], w[u], a.pos, a.grads, dim, j, a.mean);
            for (int e = 0; e < VEC; ++e) {
              const float gd = wd != 0.0f ? graphtrain::decayed(keep[u].v[e], x[u].v[e], wd) : keep[u].v[e];
              sq[u] += gd * gd;
            }
          }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const float total = group_sum(sq[u], gmask, G);
          float scale = 0.0f;
          if (li == 0 && ok[u]) {
            const float acc = graphtrain::rowwise_accumulate(acc0[u], total, dim);
            a.s0[w[u].r] = acc;
            scale = graphtrain::rowwise_scale(acc, a.p);
          }
          rsc[u] = __shfl_sync(gmask, scale, 0, G);
          sq[u] = 0.0f;
        }
      }
      for (int64_t j = li * VEC; j < dim; j += G * VEC) {
        Vec<VEC> g[U], m[U], v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {  // every load of U rows first
          if (!ok[u]) continue;
          const int64_t at = w[u].r * dim + j;
          load_row<VEC, TD>(x[u], a.table, at);
          if constexpr (KIND == graphtrain::kAdagrad || KIND == graphtrain::kAdam) m[u].load(a.s0 + at);
          if constexpr (KIND == graphtrain::kAdam) v[u].load(a.s1 + at);
          if (KIND == graphtrain::kRowwiseAdagrad && one_step)
            g[u] = keep[u];
          else
            g[u].load(w[u].first + j);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (!ok[u]) continue;
          if (!(KIND == graphtrain::kRowwiseAdagrad && one_step) && w[u].end - w[u].begin > 1)
            reduce_rest<VEC>(g[u], w[u], a.pos, a.grads, dim, j, a.mean);
          const int64_t at = w[u].r * dim + j;
          for (int e = 0; e < VEC; ++e) {
            const float gd = graphtrain::maybe_decayed(g[u].v[e], x[u].v[e], wd);
            if constexpr (KIND == graphtrain::kSGD) graphtrain::sgd_elem(x[u].v[e], gd, a.p);
            if constexpr (KIND == graphtrain::kAdagrad) graphtrain::adagrad_elem(x[u].v[e], m[u].v[e], gd, a.p);
            if constexpr (KIND == graphtrain::kRowwiseAdagrad) graphtrain::rowwise_elem(x[u].v[e], gd, rsc[u]);
            if constexpr (KIND == graphtrain::kAdam)
              graphtrain::adam_elem(x[u].v[e], m[u].v[e], v[u].v[e], gd, a.p, coef[u]);
            sq[u] += x[u].v[e] * x[u].v[e];
          }
          store_row<VEC, TD>(x[u], a.table, at, key[u], j);
          if constexpr (KIND == graphtrain::kAdagrad || KIND == graphtrain::kAdam) m[u].store(a.s0 + at);
          if constexpr (KIND == graphtrain::kAdam) v[u].store(a.s1 + at);
        }
      }
      if constexpr (TD == graphtrain::kTableFloat32) {  // a half table's rows are projected after (host)
        if (a.row_norm > 0.0f) project<VEC, U>(a, w, ok, sq, x, one_step, li, gmask);
      }
    }
  }
}

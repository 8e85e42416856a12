// The CPU core's sum of one id's duplicate gradient rows, in the canonical order of optim_math.h
// (kSumChunk), shared by the fused step and gt_dedup. Included by optim_cpu.cpp only.
#pragma once

#include "graphtrain/optim_math.h"

#include <cstdint>
#include <cstring>

namespace {

// One id's gradient rows summed in the canonical order of optim_math.h (kSumChunk): the first chunk
// straight into dst, each later chunk into `part`, added to dst once complete.
struct ChunkedSum {
  float* dst;
  float* part;  // a scratch row, used only for ids seen more than kSumChunk times
  int64_t dim;
  int64_t k = 0;  // rows added so far

  void add(const float* src) {
    float* into = k < graphtrain::kSumChunk ? dst : part;
    if (k == 0 || (k >= graphtrain::kSumChunk && k % graphtrain::kSumChunk == 0))
      std::memcpy(into, src, sizeof(float) * dim);
    else
      for (int64_t j = 0; j < dim; ++j) into[j] += src[j];
    ++k;
    if (k > graphtrain::kSumChunk && k % graphtrain::kSumChunk == 0) fold();
  }
  // After the last row: a partly filled later chunk joins the sum.
  void finish() {
    if (k > graphtrain::kSumChunk && k % graphtrain::kSumChunk != 0) fold();
  }

 private:
  void fold() {
    for (int64_t j = 0; j < dim; ++j) dst[j] += part[j];
  }
};

}  // namespace

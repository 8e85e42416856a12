// A shard table's lock, shared by the Python side of a shard server and its fast lane (fastlane.cpp),
// and what the lane needs to step the table's rows exactly as the Python path does
// (runtime/storage/update.py: locked_step) while it holds that lock.
//
// Why native. The lane answers gradient pushes on its own thread, without the GIL; the rows it steps
// are also written by the server's Python threads (pushes over ZMQ, restores, checkpoints copying
// them). Both must take one lock, so the lock lives here and Python's `with t.lock` calls into it
// (runtime/storage/tablelock.py). It is a binary semaphore, as Python's threading.Lock is: any thread
// may release it.
//
// The step's description (pointers, optimizer, flags) is written by Python while it holds the lock,
// and `steppable` says it is current: Python clears it when it changes anything the description holds
// (the rows' tensor, the optimizer, its state, a checkpoint's changed-row mask, the table's name or
// bounds: TensorShard's LANE_WATCHED), or arms anything the lane does not do (a background
// checkpoint's copy of rows about to be written), and describes the table again later; until then the
// lane answers "busy" and the client pushes over ZMQ. A half table's step count (`steps`) is counted
// in place by both, under the lock, and never replaced.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "graphtrain/optim_math.h"

namespace graphtrain {

struct StepDesc {
  int32_t kind = 0;              // graphtrain::OptimKind
  int32_t mean = 0;              // duplicate ids' gradients averaged (1) or summed (0)
  int32_t refuse_nonfinite = 1;  // a gradient holding NaN or infinity refuses the whole push
  int64_t dim = 0, num_rows = 0;
  void* table = nullptr;      // the rows: float32, or float16 / bfloat16 bits (table_dtype)
  int32_t table_dtype = 0;    // kTableFloat32, kTableFloat16 or kTableBFloat16 (optim_math.h)
  uint64_t seed_base = 0;     // a half table's rounding seeds: seed_base | (++*steps & 0xFFFFFFFF)
  int64_t* steps = nullptr;   // a half table's step count (TensorShard.round_seed's), or null
  float* state0 = nullptr;
  float* state1 = nullptr;
  int64_t* row_steps = nullptr;    // Adam's per-row counts, or null
  int64_t* global_step = nullptr;  // Adam's one count (state["step"]), or null
  uint8_t* changed = nullptr;      // rows written since the last checkpoint armed (one bool a row), or null
  OptimParams params{};
};

struct TableLock {
  std::mutex mu;
  std::condition_variable freed;
  bool held = false;
  std::atomic<bool> steppable{false};
  StepDesc desc;

  bool try_acquire() {
    std::lock_guard<std::mutex> g(mu);
    if (held) return false;
    held = true;
    return true;
  }
  void release() {
    {
      std::lock_guard<std::mutex> g(mu);
      held = false;
    }
    freed.notify_one();
  }
};

}  // namespace graphtrain

// The shard tables' lock (table_lock.h): the C ABI that runtime/storage/tablelock.py binds.

#include "table_lock.h"

#include <chrono>
#include <new>

#include "graphtrain/api.h"

using graphtrain::TableLock;

GT_API void* gt_lock_new() { return new (std::nothrow) TableLock(); }

GT_API void gt_lock_free(void* lock) { delete static_cast<TableLock*>(lock); }

// Take the lock: blocking 0 tries once; else waits, for at most timeout_s seconds when >= 0. Returns 1
// when taken. Python calls it with the GIL released (ctypes), so a wait never blocks other threads.
GT_API int32_t gt_lock_acquire(void* lock, int32_t blocking, double timeout_s) {
  auto* l = static_cast<TableLock*>(lock);
  std::unique_lock<std::mutex> g(l->mu);
  if (l->held) {
    if (!blocking) return 0;
    if (timeout_s < 0) {
      l->freed.wait(g, [l] { return !l->held; });
    } else if (!l->freed.wait_for(g, std::chrono::duration<double>(timeout_s), [l] { return !l->held; })) {
      return 0;
    }
  }
  l->held = true;
  return 1;
}

// Release it (any thread may); returns 0, or -1 if it was not held (Python raises, as Lock.release does).
GT_API int32_t gt_lock_release(void* lock) {
  auto* l = static_cast<TableLock*>(lock);
  {
    std::lock_guard<std::mutex> g(l->mu);
    if (!l->held) return -1;
    l->held = false;
  }
  l->freed.notify_one();
  return 0;
}

GT_API int32_t gt_lock_locked(void* lock) {
  auto* l = static_cast<TableLock*>(lock);
  std::lock_guard<std::mutex> g(l->mu);
  return l->held ? 1 : 0;
}

// The lane's description of the table's step (table_lock.h), written by the lock's holder; it makes the
// table steppable by the lane. Returns 1 if the lock was not held, or the table's type is not one the core
// steps (or a half table's without its step count): nothing written.
GT_API int32_t gt_lock_describe(void* lock, int32_t kind, int32_t mean, int32_t refuse_nonfinite, int64_t dim,
                                int64_t num_rows, void* table, int32_t table_dtype, uint64_t seed_base,
                                int64_t* steps, float* state0, float* state1, int64_t* row_steps,
                                int64_t* global_step, uint8_t* changed, graphtrain::OptimParams params) {
  auto* l = static_cast<TableLock*>(lock);
  if (!gt_lock_locked(lock)) return 1;
  if (table_dtype < graphtrain::kTableFloat32 || table_dtype > graphtrain::kTableBFloat16 ||
      (table_dtype != graphtrain::kTableFloat32 && steps == nullptr))
    return 1;
  l->desc = graphtrain::StepDesc{kind,   mean,   refuse_nonfinite, dim,         num_rows, table, table_dtype, seed_base,
                                 steps, state0, state1,           row_steps,   global_step, changed, params};
  l->steppable.store(true, std::memory_order_release);
  return 0;
}

// Something the description holds changed (or the lane must not step now): the lane leaves the table's
// pushes to the Python path until it is described again. Any thread, with or without the lock.
GT_API void gt_lock_stale(void* lock) {
  static_cast<TableLock*>(lock)->steppable.store(false, std::memory_order_release);
}

// What crosses the CUDA core's C ABI when something goes wrong: the return codes, the thread-local message
// each failed call leaves (gt_cuda_last_error), and the guard that runs a call on the caller's device.
// No exception and no CUDA error crosses the ABI: every exported function turns them into a code here.
// Included by optim_cuda.cu and sampling_cuda.cu.
#pragma once

#include <cuda_runtime.h>

#include <exception>
#include <string>

namespace graphtrain::cuda_core {

// Return codes of the exported functions (runtime/native/cuda.py has the same numbers).
constexpr int kBadId = -1;     // an id outside the table: its position is in out[0], nothing was touched
constexpr int kCudaError = -2;  // a CUDA call failed: gt_cuda_last_error() says which and why
constexpr int kBadArgument = -3;  // an argument the caller should have refused (workspace too small, ...)
constexpr int kNonFinite = -4;  // a gradient row holds NaN or infinity (asked to refuse): its row in out[0]

inline thread_local std::string last_error;

inline int fail(const char* fn, const char* stage, cudaError_t err) {
  last_error = std::string(fn) + ": " + stage + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
  return kCudaError;
}

inline int fail_arg(const char* fn, const std::string& what) {
  last_error = std::string(fn) + ": " + what;
  return kBadArgument;
}

// What a C++ exception (std::bad_alloc from a message string, say) becomes at the boundary.
inline int fail_exception(const char* fn) {
  try {
    throw;
  } catch (const std::exception& e) {
    try {
      last_error = std::string(fn) + ": unexpected C++ exception: " + e.what();
    } catch (...) {
    }
  } catch (...) {
    try {
      last_error = std::string(fn) + ": unexpected C++ exception";
    } catch (...) {
    }
  }
  return kCudaError;
}

// Runs on `device` for the guard's lifetime, then restores the calling thread's device.
struct DeviceGuard {
  int previous = -1;
  cudaError_t err = cudaSuccess;
  explicit DeviceGuard(int device) {
    err = cudaGetDevice(&previous);
    if (err == cudaSuccess && previous != device) err = cudaSetDevice(device);
  }
  ~DeviceGuard() {
    int now = -1;
    if (previous >= 0 && cudaGetDevice(&now) == cudaSuccess && now != previous) cudaSetDevice(previous);
  }
};

}  // namespace graphtrain::cuda_core

// Export macro of the native core's C ABI. The library is built with -fvisibility=hidden so that only
// functions marked GT_API are visible to ctypes.
#pragma once

#if defined(__GNUC__)
#define GT_API extern "C" __attribute__((visibility("default")))
#else
#define GT_API extern "C"
#endif

// Hot loops built for AVX-512, AVX2 and baseline x86-64, the best picked when the library loads
// (GCC/Clang function multi-versioning); a plain function elsewhere.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__CUDACC__)
#define GT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define GT_CLONES
#endif

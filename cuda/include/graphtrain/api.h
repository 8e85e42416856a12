// Export macro of the native core's C ABI. The library is built with -fvisibility=hidden so that only
// functions marked GT_API are visible to ctypes.
#pragma once

#if defined(__GNUC__)
#define GT_API extern "C" __attribute__((visibility("default")))
#else
#define GT_API extern "C"
#endif

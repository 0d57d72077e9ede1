// The kernel cache's state, without Halide's headers (the unit tests are built without
// them): statistics, the directory in use, the thread pool size, the target.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace collage::halide_backend {

// The generated `NAME_argv` function: one halide_buffer_t* per argument.
using EntryPoint = int (*)(void** args);

struct CacheStats {
  int64_t memory_hits = 0;
  int64_t disk_hits = 0;
  int64_t compiles = 0;
  double compile_seconds = 0;  // LLVM + link time of `compiles`
};

CacheStats cache_stats();
// Forgets the in-memory map (loaded objects stay loaded): the next lookups go to disk.
void clear_memory_cache();
// The directory in use for kernels ("" before the first kernel is built).
std::string cache_dir();
// Halide's thread pool size, one per process (the runtime is told when it loads, and again
// on change): every kernel sets its own count before it runs (HalideBackend::thread_control).
void set_num_threads(int threads);
// What the Halide runtime last reported on this thread (a failed kernel's reason).
std::string last_kernel_error();
// The target kernels are compiled for (the host's ISA, e.g. x86-64-linux-avx512...).
std::string target_string();

// The generated kernels' math (halide_math.h) evaluated on `xs` through Halide's JIT,
// vectorised as in kernels: lets tests hold the approximations to libm.
enum class MathFn { kExp, kErf, kTanh, kSigmoid };
std::vector<float> evaluate_math(MathFn fn, const std::vector<float>& xs);

}  // namespace collage::halide_backend

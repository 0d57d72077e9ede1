#include "runtime/threads.h"

#include <omp.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <optional>

#include "collage/error.h"
#include "runtime/cpu_quota.h"

namespace collage {

// The CPUs this process may use, not the machine's: under `taskset -c 1` or a container's
// cpuset, hardware_concurrency() still counts every CPU, and the default ran two threads on
// one CPU (MobileNetV2's plan 5.1 ms a run instead of ~2.9 under `taskset -c 1`, 2026-12-06).
// libgomp counts the mask the process started with, before its binding (OMP_PROC_BIND)
// narrows the loading thread to one CPU. A CPU bandwidth limit counts too (cpu_quota.h).
int hardware_cores() {
  const int cpus = std::max(1, omp_get_num_procs());
  const std::optional<int> limit = process_cpu_limit();
  return limit ? std::min(cpus, *limit) : cpus;
}

int resolve_threads(int requested) {
  if (requested < 0) fail(ErrorKind::kInvalidArgument, "--threads must be >= 0, got {}", requested);
  const int cores = hardware_cores();
  // Honoured (a user may mean it), but said once: threads beyond the CPUs share them, and
  // every parallel region then waits for a descheduled thread (the zoo's DCGAN on this 2-CPU
  // machine: ~1 ms a run with 2 threads, 64 ms with 64).
  static std::atomic<bool> warned{false};
  if (requested > cores && !warned.exchange(true))
    spdlog::warn(
        "{} threads for the {} CPUs this process may use: threads beyond the CPUs "
        "share them and every kernel runs slower (--threads sets the count)",
        requested, cores);
  return requested == 0 ? cores : requested;
}

void use_threads_on_this_thread(int threads) {
  // Unconditional (no "already set" shortcut): a library may reset it inside a kernel
  // (libtorch's lazy per-thread init sets its own default), and the call is a store into
  // this thread's OpenMP state.
  if (threads > 0) omp_set_num_threads(threads);
}

namespace {
#if defined(__SSE__)
constexpr unsigned kFlushToZero = 0x8000, kDenormalsAreZero = 0x0040;
#endif
}  // namespace

DenormalsFlushed::DenormalsFlushed() {
#if defined(__SSE__)
  saved_ = _mm_getcsr();
  _mm_setcsr(saved_ | kFlushToZero | kDenormalsAreZero);
#endif
}

DenormalsFlushed::~DenormalsFlushed() {
#if defined(__SSE__)
  _mm_setcsr(saved_);
#endif
}

void flush_denormals_on_openmp_team(int threads) {
#if defined(__SSE__)
  if (threads < 2 || omp_in_parallel()) return;
#pragma omp parallel num_threads(threads)
  if (omp_get_thread_num() != 0) _mm_setcsr(_mm_getcsr() | kFlushToZero | kDenormalsAreZero);
#endif
}

}  // namespace collage

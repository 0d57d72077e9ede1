// After a parallel call, every thread pool keeps its idle workers spinning for a while, so
// the next call of the same library starts without a wake-up. collage alternates kernels of
// libraries with separate pools (oneDNN and libtorch on libgomp, OpenBLAS on its pthread
// server, XNNPACK on pthreadpool, Halide's own): a worker of one pool spinning after its
// kernel holds a core the next kernel's pool needs, and on 2 cores that doubles the next
// kernel's time. Two of those pools read their spin limit from the environment once, when
// they load, before main() (an .preinit_array setenv was tried: libgomp still saw the
// default), so the CLI sets short limits and re-executes itself once:
//   - libgomp: GOMP_SPINCOUNT, 300k iterations by default;
//   - OpenBLAS (pthread build): OPENBLAS_THREAD_TIMEOUT = log2 of the cycles its workers
//     yield-spin, 2^28 by default (~0.1 s).
// XNNPACK's pthreadpool is put to sleep by each kernel as its run ends (the xnnpack
// backend's ThreadPool::yield_workers).
// A user's explicit OMP_WAIT_POLICY / GOMP_SPINCOUNT / OPENBLAS_THREAD_TIMEOUT always wins.
#include "cli/idle_spin_env.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace collage::cli {
namespace {

// Commands that never run a kernel (info, zoo, show, backends) skip the extra exec.
bool runs_kernels(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (a[0] == '-') continue;
    return !std::strcmp(a, "run") || !std::strcmp(a, "tune") || !std::strcmp(a, "bench") ||
           !std::strcmp(a, "measure-worker");
  }
  return false;
}

}  // namespace

void bound_idle_spinning(int argc, char** argv) {
  if (!runs_kernels(argc, argv)) return;
  bool changed = false;
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT")) {
    // ~10 µs: catches back-to-back regions of one kernel, then lets the core go.
    setenv("GOMP_SPINCOUNT", "10000", 1);
    changed = true;
  }
  if (!std::getenv("OPENBLAS_THREAD_TIMEOUT")) {
    // 2^15 cycles, ~10 µs: the same bound for OpenBLAS's workers.
    setenv("OPENBLAS_THREAD_TIMEOUT", "15", 1);
    changed = true;
  }
  if (changed) execv("/proc/self/exe", argv);
  // exec failed (no /proc?): carry on with the libraries' defaults.
}

}  // namespace collage::cli

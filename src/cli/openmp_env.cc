// libgomp's idle workers spin (GOMP_SPINCOUNT, 300k iterations by default) after every
// parallel region. collage alternates kernels of backends with separate thread pools
// (oneDNN on OpenMP, OpenBLAS on pthreads, XNNPACK on pthreadpool): a spinning OpenMP
// worker then holds a core the next backend's threads need. libgomp reads its
// environment once, when it loads, before main() (and before the executable's
// .preinit_array takes effect for it: tried, libgomp still saw the default), so the CLI
// sets a short spin count and re-executes itself once. A user's explicit OMP_WAIT_POLICY
// or GOMP_SPINCOUNT always wins.
#include "cli/openmp_env.h"

#include <unistd.h>

#include <cstdlib>

namespace collage::cli {

void bound_openmp_spinning(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  // ~10 µs of spinning: enough to catch back-to-back regions of one kernel, short enough
  // that the next backend's threads get the core.
  setenv("GOMP_SPINCOUNT", "10000", 1);
  execv("/proc/self/exe", argv);
  // exec failed (no /proc?): carry on with libgomp's default policy.
}

}  // namespace collage::cli

#include "runtime/threads.h"

#include <omp.h>

#include <algorithm>
#include <thread>

#include "collage/error.h"

namespace collage {

int hardware_cores() {
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

int resolve_threads(int requested) {
  if (requested < 0) fail(ErrorKind::kInvalidArgument, "--threads must be >= 0, got {}", requested);
  return requested == 0 ? hardware_cores() : requested;
}

void use_threads_on_this_thread(int threads) {
  // Unconditional (no "already set" shortcut): a library may reset it inside a kernel
  // (libtorch's lazy per-thread init sets its own default), and the call is a store into
  // this thread's OpenMP state.
  if (threads > 0) omp_set_num_threads(threads);
}

}  // namespace collage

#include <omp.h>

#include <mutex>
#include <thread>
#include <vector>

#include "collage/session.h"

namespace collage {
namespace {

int g_threads = 0;

}  // namespace

void set_thread_budget(int threads) {
  if (threads < 0) fail(ErrorKind::kInvalidArgument, "--threads must be >= 0, got {}", threads);
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  g_threads = threads == 0 ? std::max(cores, 1) : threads;
  // One budget for every pool: OpenMP (reference kernels, oneDNN, OpenBLAS-openmp) here;
  // backends with their own pools read thread_budget() when they compile.
  omp_set_num_threads(g_threads);
}

int thread_budget() {
  if (g_threads == 0) set_thread_budget(0);
  return g_threads;
}

}  // namespace collage

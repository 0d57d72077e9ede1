#include "backends/blas/openblas_info.h"

#include <atomic>

#include <cblas.h>

#include <strings.h>

#include <cstdlib>
#include <sstream>

#include <fmt/format.h>

namespace collage::blas {

namespace {

bool openmp_waits_passively() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  return (policy && strcasecmp(policy, "passive") == 0) || (spin && std::string(spin) == "0");
}

}  // namespace

std::string openblas_version() {
  // The config string reads "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64".
  std::istringstream config(openblas_get_config());
  std::string name, version;
  config >> name >> version;
  return version.empty() ? "unknown" : version;
}

std::string openblas_kernel() {
  const char* core = openblas_get_corename();
  return core && *core ? core : "unknown";
}

std::vector<std::string> openblas_details() {
  std::vector<std::string> lines = {
      fmt::format("kernel: {}", openblas_kernel()),
      fmt::format("config: {}", openblas_get_config()),
      fmt::format("threads: {}", openblas_get_num_threads()),
      openmp_waits_passively()
          ? std::string("im2col/epilogues: OpenMP (it waits passively)")
          : std::string("im2col/epilogues: caller's thread (set OMP_WAIT_POLICY=passive to "
                        "parallelize them: actively waiting OpenMP workers stall OpenBLAS)"),
  };
  if (const char* forced = std::getenv("OPENBLAS_CORETYPE"); forced && *forced) {
    std::string hint = fmt::format("OPENBLAS_CORETYPE={} is set and chooses that kernel", forced);
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
      hint += "; this CPU has AVX-512: unset it or set OPENBLAS_CORETYPE=SkylakeX (~2x sgemm)";
    else
      hint += "; unset it to let OpenBLAS detect the CPU";
    lines.push_back(hint);
  }
  return lines;
}

int helper_threads(int budget) {
  return openmp_waits_passively() ? budget : 1;
}

void set_openblas_threads(int threads) {
  // One count per process (the pthreads build has no per-call count): set only on a change,
  // so kernels of one count in a row pay nothing.
  static std::atomic<int> current{0};
  threads = threads > 0 ? threads : 1;
  if (current.exchange(threads) != threads) openblas_set_num_threads(threads);
}

}  // namespace collage::blas

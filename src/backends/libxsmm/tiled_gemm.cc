#include "backends/libxsmm/tiled_gemm.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "collage/error.h"

namespace collage::xsmm {
namespace {

// A tile of 64 rows is four AVX-512 vectors per column, the register block libxsmm's
// generator uses; 64 columns keep B's slice (k x 64) and C's tile (64 x 64 floats, 16 KiB)
// in L2 for the k of ResNet/MobileNet 1x1 convs. Measured (bench/libxsmm_bench.cc).
constexpr int64_t kTileM = 64;
constexpr int64_t kTileN = 64;

// libxsmm 1.17's init "sets up a viable affinity" when the environment names none: it
// putenv()s OMP_PROC_BIND=TRUE. This process's OpenMP stays as it is (libgomp read its
// environment at load), but every process started afterwards inherits it. The tuner's
// measure worker then bound its main thread to CPU 0, and the thread pools created from that
// thread (XNNPACK's pthreadpool, Halide's) to CPU 0 with it: their 2-thread kernels ran on
// one core, the caller spinning while its worker waited for a time slice (an XNNPACK conv of
// NASNet measured 8.0 ms instead of ~0.2 ms; 8 ms per operator in every candidate). The
// variable is removed again unless the user had set one of the three.
void init_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    const bool affinity_unset =
        !getenv("OMP_PROC_BIND") && !getenv("GOMP_CPU_AFFINITY") && !getenv("KMP_AFFINITY");
    libxsmm_init();
    if (affinity_unset) unsetenv("OMP_PROC_BIND");
  });
}

}  // namespace

const char* jit_target() {
  init_once();
  return libxsmm_get_target_arch();
}

bool has_jit() {
  init_once();
  return libxsmm_get_target_archid() >= LIBXSMM_X86_AVX2;
}

libxsmm_smmfunction TiledGemm::kernel(int64_t m, int64_t n) const {
  const libxsmm_blasint lda = s_.lda, ldb = s_.ldb, ldc = s_.ldc;
  const float alpha = 1, beta = 0;
  const int flags = LIBXSMM_GEMM_FLAG_BETA_0;
  const int prefetch = LIBXSMM_PREFETCH_NONE;
  libxsmm_smmfunction f = libxsmm_smmdispatch(
      static_cast<libxsmm_blasint>(m), static_cast<libxsmm_blasint>(n),
      static_cast<libxsmm_blasint>(s_.k), &lda, &ldb, &ldc, &alpha, &beta, &flags, &prefetch);
  if (!f)
    fail(ErrorKind::kUnsupported, "libxsmm: no JIT kernel for m={} n={} k={} (target {})", m, n,
         s_.k, jit_target());
  return f;
}

TiledGemm::TiledGemm(const GemmShape& shape, Epilogue epilogue, ChannelAxis axis)
    : s_(shape), epilogue_(std::move(epilogue)), axis_(axis) {
  init_once();
  if (s_.m <= 0 || s_.n <= 0 || s_.k <= 0 || s_.batch <= 0)
    fail(ErrorKind::kUnsupported, "libxsmm: empty GEMM");
  if (!has_jit()) fail(ErrorKind::kUnsupported, "libxsmm: no JIT on target {}", jit_target());
  tile_m_ = std::min(kTileM, s_.m);
  tile_n_ = std::min(kTileN, s_.n);
  const int64_t rm = s_.m % tile_m_, rn = s_.n % tile_n_;
  kernels_[0][0] = kernel(tile_m_, tile_n_);
  if (rm) kernels_[1][0] = kernel(rm, tile_n_);
  if (rn) kernels_[0][1] = kernel(tile_m_, rn);
  if (rm && rn) kernels_[1][1] = kernel(rm, rn);
}

void TiledGemm::run(const float* a, const float* b, float* c) const {
  const int64_t tiles_m = (s_.m + tile_m_ - 1) / tile_m_, tiles_n = (s_.n + tile_n_ - 1) / tile_n_;
  const int64_t tiles = s_.batch * tiles_m * tiles_n;
  const bool columns = axis_ == ChannelAxis::kColumns;
#pragma omp parallel for schedule(static) if (tiles > 1)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t bi = t / (tiles_m * tiles_n), rest = t % (tiles_m * tiles_n);
    // Consecutive tiles walk m first: a thread's tiles share B's columns.
    const int64_t tn = rest / tiles_m, tm = rest % tiles_m;
    const int64_t m0 = tm * tile_m_, n0 = tn * tile_n_;
    const int64_t mm = std::min(tile_m_, s_.m - m0), nn = std::min(tile_n_, s_.n - n0);
    const libxsmm_smmfunction f = kernels_[mm != tile_m_][nn != tile_n_];
    float* ct = c + bi * s_.c_stride + n0 * s_.ldc + m0;
    f(a + bi * s_.a_stride + m0, b + bi * s_.b_stride + n0 * s_.ldb, ct);
    for (int64_t j = 0; j < nn; ++j) {
      float* col = ct + j * s_.ldc;
      if (columns) {
        epilogue_.apply(col, mm, n0 + j);
      } else {
        epilogue_.apply_along(col, mm, m0);
      }
    }
  }
}

}  // namespace collage::xsmm

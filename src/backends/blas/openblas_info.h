// What the linked OpenBLAS is and how it is configured: version, the kernel (core) it
// picked, and its thread count, which the backend keeps equal to collage's thread budget.
#pragma once

#include <string>
#include <vector>

namespace collage::blas {

// "0.3.21", parsed from openblas_get_config().
std::string openblas_version();
// The kernel (core) OpenBLAS runs, "Cooperlake": chosen when the library loads, from the CPU
// or from OPENBLAS_CORETYPE where that is set.
std::string openblas_kernel();
// Lines for `collage backends`: the kernel in use, the build config, and a hint when
// OPENBLAS_CORETYPE forces a kernel (these machines export Haswell, half speed on AVX-512).
std::vector<std::string> openblas_details();
// Threads for the backend's own OpenMP loops (im2col, col2im, epilogues) given the budget:
// 1 unless OpenMP waits passively (OMP_WAIT_POLICY=passive or GOMP_SPINCOUNT=0). With
// libgomp's default active wait, its workers spin for a while after every parallel region
// and take the cores from OpenBLAS's pthreads in the sgemm that follows: measured 10-20x
// slower convolutions on 2 cores.
int helper_threads(int budget);
// Sets OpenBLAS's pthread pool size (OpenBLAS ignores OpenMP's setting in this build); a
// process-wide setting, made before each kernel runs (see BlasBackend::thread_control).
void set_openblas_threads(int threads);

}  // namespace collage::blas

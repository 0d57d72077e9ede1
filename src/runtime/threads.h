// Thread counts are parameters, never process state: a session runs with the count it was
// made with, each kernel with the count it was compiled for (CompileOptions::threads).
#pragma once

namespace collage {

// `requested` threads, or every CPU this process may use for 0. Throws Error(kInvalidArgument) when
// negative.
int resolve_threads(int requested);
// The CPUs this process may use: its affinity mask at start (as `nproc` counts them), or
// fewer where a cgroup CPU bandwidth limit allows less (cpu_quota.h).
int hardware_cores();

// Before a kernel runs on this thread: sets this thread's OpenMP thread count (OpenMP
// keeps it per calling thread, so concurrent steps on other threads keep theirs).
void use_threads_on_this_thread(int threads);

// Denormal floats (magnitudes below 1.2e-38) are flushed to zero while kernels run, on input
// and output (x86 MXCSR DAZ and FTZ), as TensorFlow does on CPU by default: x86 takes a
// microcode assist of ~100 cycles for each denormal operand, and models with random or
// decayed weights produce them deep in the network. Measured on a random-weight
// EfficientNet-B0 (tuned plan, 2 threads): 6.3 -> 5.5 ms; MNASNet and MobileNetV2 ~5 %.
// The results change by less than 1.2e-38 per value. MXCSR is per thread:
//   - DenormalsFlushed sets it on the calling thread for its scope (runs, compiles,
//     measurements) and restores what the caller had;
//   - threads created inside such a scope inherit it (Linux copies the FP state: the
//     executor's lane workers, a pool a kernel starts when it is compiled);
//   - flush_denormals_on_openmp_team sets it on the workers of this thread's OpenMP team,
//     which keep it under libgomp (it reuses them for every later parallel region of this
//     thread); LLVM's libomp, which the CLI preloads (src/cli/library_env.cc), copies the
//     forking thread's MXCSR to its workers at every fork instead (KMP_INHERIT_FP_CONTROL),
//     so there the scope's own setting reaches them.
// Pools a library started before (OpenBLAS's, at load) keep IEEE denormals.
class DenormalsFlushed {
 public:
  DenormalsFlushed();
  ~DenormalsFlushed();
  DenormalsFlushed(const DenormalsFlushed&) = delete;
  DenormalsFlushed& operator=(const DenormalsFlushed&) = delete;

 private:
  unsigned saved_ = 0;
};
void flush_denormals_on_openmp_team(int threads);

}  // namespace collage

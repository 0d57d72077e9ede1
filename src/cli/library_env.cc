// Settings that libraries read from the environment once, when they load (before main():
// an .preinit_array setenv was tried, and libgomp still saw the default), so the CLI sets
// them and re-executes itself once. A user's explicit setting always wins.
//
// Idle spinning. After a parallel call, every thread pool keeps its idle workers spinning
// for a while, so the next call of the same library starts without a wake-up. collage
// alternates kernels of libraries with separate pools (oneDNN and libtorch on libgomp,
// OpenBLAS on its pthread server, XNNPACK on pthreadpool, Halide's own): a worker of one pool
// spinning after its kernel holds a core the next kernel's pool needs, and on 2 cores that
// doubles the next kernel's time. So:
//   - libgomp: GOMP_SPINCOUNT, 300k iterations by default;
//   - OpenBLAS (pthread build): OPENBLAS_THREAD_TIMEOUT = log2 of the cycles its workers
//     yield-spin, 2^28 by default (~0.1 s).
// XNNPACK's pthreadpool is put to sleep by each kernel as its run ends (the xnnpack
// backend's ThreadPool::yield_workers).
//
// Huge pages for malloc's mapped blocks (GLIBC_TUNABLES=glibc.malloc.hugetlb=1, glibc 2.35
// and later). glibc's malloc maps each large block (32 MiB and more, and smaller ones until
// its threshold adapts) on its own and unmaps it when freed, so a library that allocates its
// temporaries per call (libtorch's ATen: every intermediate of a TorchScript region, the
// column buffers of its 3-D convolutions) takes a page fault for every 4 KiB of them on every
// run (~11 us each here). With the tunable, malloc asks for transparent huge pages on those
// blocks (madvise; the kernel's THP mode is "madvise" on Debian): one fault per 2 MiB.
// Measured 2026-12-06 on the 2-core EPYC (`collage run --threads 2 --repeat 5 --json`, with
// GLIBC_TUNABLES=glibc.malloc.hugetlb=0 and without, one after the other): S3D
// (1x3x16x224x224) on torch 588 -> 367 ms a run and 37,635 -> 1,354 page faults a run, on
// torch-graph 316 -> 251 ms and 12,545 -> 792; a region of three elementwise ops over
// 1x16x768x768 on torch-graph 197 -> 35 ms; peak RSS within 10 %. Every block from the
// heap instead (mallopt(M_MMAP_MAX, 0), no trimming) was tried first and dropped: the heap
// grew by a block a run (docs/DESIGN.md, "Runtime").
//
// The OpenMP runtime. collage, oneDNN and libtorch call OpenMP through libgomp's entry points
// (GCC builds them so), and each oneDNN primitive or collage step of a region is one parallel
// region: MobileNetV2's plan forks and joins 54 a run. Under libgomp an empty parallel region
// of 2 threads costs 3.0 us on this VM (a cross-core round trip is 0.45 us), under LLVM's
// libomp, which implements libgomp's entry points too, 1.4-1.6 us. So where libomp is
// installed (Debian's libomp5-14; the path CMake found, COLLAGE_LIBOMP) the CLI preloads it,
// and every OpenMP call of the process goes to it. Measured 2026-12-07 on the 2-core EPYC
// (alternating processes, 6 rounds, `run --plan` of tuned plans): MobileNetV2 0.948, ViT-tiny
// (blas, halide, onednn) 0.83, BERT-tiny 0.88, ResNet-50 even. Its idle spin, KMP_BLOCKTIME,
// is set to 1 ms, the least above zero it takes (0 made every fork wait for a wake-up: 33 us).
// COLLAGE_OPENMP=libgomp keeps libgomp, and so does a binding variable (OMP_PROC_BIND,
// OMP_PLACES, GOMP_CPU_AFFINITY, KMP_AFFINITY) unless COLLAGE_OPENMP=libomp asks for it.
//
// The main thread's CPUs. With OMP_PROC_BIND, OMP_PLACES or GOMP_CPU_AFFINITY set, libgomp
// binds the initial thread to its first place when it loads, before main(); the exec above
// keeps that mask, so the re-executed libgomp saw one CPU and built one place, and put its
// workers on it too; and every thread pool of another library created from the main thread
// (XNNPACK's, Halide's) and every measure worker the tuner starts inherit it. Measured
// 2026-12-06 on the 2-core EPYC, MobileNetV2's tuned plan (one onednn-graph region,
// `run --threads 2`): 2.9 ms, and 5.0-5.2 ms with OMP_PROC_BIND=true, OMP_PLACES=cores or
// OMP_PROC_BIND=close, both threads on CPU 0. So the mask the process started with is read
// before any library's constructor (.preinit_array runs first) and the main thread gets it
// back; libgomp's workers keep the places the user asked for.
#include "cli/library_env.h"

#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "util/openmp_runtime.h"

namespace collage::cli {
namespace {

cpu_set_t startup_cpus;
bool startup_cpus_known = false;

void read_startup_cpus(int, char**, char**) {
  startup_cpus_known = sched_getaffinity(0, sizeof startup_cpus, &startup_cpus) == 0;
}

// Runs before the constructors of every shared library, libgomp's among them.
__attribute__((section(".preinit_array"),
               used)) void (*const read_startup_cpus_first)(int, char**,
                                                            char**) = read_startup_cpus;

// Gives the calling (main) thread the CPUs the process started with, where a library's
// initialisation narrowed them.
void restore_startup_cpus() {
  cpu_set_t now;
  if (!startup_cpus_known || sched_getaffinity(0, sizeof now, &now) != 0 ||
      CPU_EQUAL(&now, &startup_cpus))
    return;
  sched_setaffinity(0, sizeof startup_cpus, &startup_cpus);
}

bool runs_kernels_command(const char* name) {
  return !std::strcmp(name, "run") || !std::strcmp(name, "tune") || !std::strcmp(name, "bench") ||
         !std::strcmp(name, "measure-worker");
}

// Commands that never run a kernel (info, zoo, show, backends) skip the extra exec. The
// command is the first argument that is neither an option nor a global option's value
// (main.cc: `--log-level LEVEL`, `--backend-plugin LIB...`); until 2026-12-08 the first one
// not starting with '-' was taken, so `collage --log-level info run m.onnx` (or a plugin's
// path) read as no kernel command, and that run got none of these settings: libgomp, its
// default spin, no huge pages.
bool runs_kernels(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (!std::strcmp(a, "--log-level")) {
      ++i;  // its level ("info" is a command's name too)
    } else if (!std::strcmp(a, "--backend-plugin")) {
      // its libraries, up to the next option or kernel command
      while (i + 1 < argc && argv[i + 1][0] != '-' && !runs_kernels_command(argv[i + 1])) ++i;
    } else if (a[0] != '-') {
      return runs_kernels_command(a);
    }
  }
  return false;
}

// Puts LLVM's libomp first in LD_PRELOAD (and bounds its idle spin) unless the user chose
// libgomp, it is not installed, or the process runs it already. Returns whether it did.
bool preload_libomp() {
#ifdef COLLAGE_LIBOMP
  const char* choice = std::getenv("COLLAGE_OPENMP");
  if ((choice && std::strcmp(choice, "libomp") != 0) || openmp_runtime() == "libomp" ||
      access(COLLAGE_LIBOMP, R_OK) != 0)
    return false;
  // A user who binds OpenMP's threads keeps libgomp, whose binding the main thread's mask
  // is restored against (below); libomp binds at its first parallel region, after main().
  for (const char* binding : {"OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "KMP_AFFINITY"})
    if (!choice && std::getenv(binding)) return false;
  const char* preload = std::getenv("LD_PRELOAD");
  setenv(
      "LD_PRELOAD",
      preload && *preload ? (std::string(COLLAGE_LIBOMP) + ":" + preload).c_str() : COLLAGE_LIBOMP,
      1);
  if (!std::getenv("KMP_BLOCKTIME")) setenv("KMP_BLOCKTIME", "1", 1);
  return true;
#else
  return false;
#endif
}

}  // namespace

void set_library_environment(int argc, char** argv) {
  restore_startup_cpus();
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
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (!tunables || !std::strstr(tunables, "glibc.malloc.hugetlb")) {
    const std::string hugetlb = "glibc.malloc.hugetlb=1";
    setenv(
        "GLIBC_TUNABLES",
        tunables && *tunables ? (std::string(tunables) + ":" + hugetlb).c_str() : hugetlb.c_str(),
        1);
    changed = true;
  }
  if (preload_libomp()) changed = true;
  if (changed) execv("/proc/self/exe", argv);
  // exec failed (no /proc?): carry on with the libraries' defaults.
}

}  // namespace collage::cli

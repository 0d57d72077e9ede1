// Generated CUDA C++ compiled to a cubin with NVRTC, cached in memory and on disk like the
// halide backend's kernels: $COLLAGE_CACHE_DIR/cuda-gen/<hash>.cubin (util/kernel_cache_dir.h),
// the hash over the source, the GPU architecture, NVRTC's version and the code generator's.
// The source is kept beside it (<hash>.cu) for reading. NVRTC needs no GPU, so this part runs
// and is tested on any machine with the toolkit.
//
// Why a cubin and not PTX: PTX from NVRTC 13 needs a driver that knows its PTX version; a
// cubin for the device's own architecture loads on any driver that runs the device, with no
// JIT at load time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace collage::cuda_gen {

struct CompileStats {
  int64_t memory_hits = 0, disk_hits = 0, compiles = 0;
  double compile_seconds = 0;  // NVRTC time of `compiles`
};

// The cubin of `source` (entry points extern "C") for sm_<arch> (e.g. 90). Throws
// Error(kBackend) with NVRTC's log when it does not compile, and for an architecture this
// NVRTC does not know.
std::shared_ptr<const std::string> compile_cubin(const std::string& source, int arch);

CompileStats compile_stats();
// Forgets the in-memory map: the next lookups go to disk.
void clear_memory_cache();
// The directory in use ("" before the first compile).
std::string cache_dir();
// "13.0".
std::string nvrtc_version();

}  // namespace collage::cuda_gen

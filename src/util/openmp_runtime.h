// Which OpenMP runtime this process's OpenMP calls go to. collage's own parallel loops, oneDNN
// and libtorch are built against GNU libgomp, whose entry points LLVM's libomp implements
// too; the CLI preloads libomp where it is installed, since a parallel region (one per oneDNN
// primitive and custom step) costs 3.0 us to fork and join under libgomp on this VM and 1.4-1.6
// under libomp (src/cli/library_env.cc). Costs measured under one runtime are not the other's,
// so the hardware fingerprint names it (plan/hardware.h), and `run --json` reports it.
#pragma once

#include <string>

namespace collage {

// "libomp" (LLVM's or Intel's runtime), "libgomp", another library's file name, or "" when no
// OpenMP runtime is loaded.
std::string openmp_runtime();

}  // namespace collage

// Compiled Halide kernels, cached in memory and on disk.
//
// Why not Halide's JIT: a JIT'd pipeline lives only in this process, so every tune or run
// would pay LLVM again (0.1-0.4 s per kernel here), and calling it goes through
// Pipeline::realize's argument marshalling. Instead each pipeline is compiled ahead of time
// (Module -> object file, without the Halide runtime), linked by the system linker (`ld
// -shared`, no compiler involved) into a small shared object named by a hash of the
// pipeline's canonical text and the target, and dlopen()ed; its entry point is a plain C
// call. One copy of the Halide runtime (compiled once per target, also cached) is loaded
// with RTLD_GLOBAL first, so every kernel shares one thread pool.
//
// Cache directory: $COLLAGE_CACHE_DIR/halide, else $XDG_CACHE_HOME/collage/halide, else
// ~/.cache/collage/halide. When it cannot be created the kernels are built in a private
// temporary directory instead (warned once) and nothing persists.
#pragma once

#include <Halide.h>

#include <functional>
#include <string>

#include "backends/halide/cache_stats.h"

namespace collage::halide_backend {

// Builds the Module for a function named `name` for `target`, on a miss.
using ModuleBuilder =
    std::function<Halide::Module(const std::string& name, const Halide::Target& target)>;

// The target kernels are compiled for: this CPU's, with only the features it has (Halide's
// own detection can claim more, jit_cache.cc).
const Halide::Target& host_target();

// The entry point of the kernel whose canonical text is `description`: from memory, from
// the disk cache, or compiled with `build`. Throws Error(kBackend) when compiling, linking
// or loading fails.
EntryPoint get_kernel(const std::string& description, const ModuleBuilder& build);

}  // namespace collage::halide_backend

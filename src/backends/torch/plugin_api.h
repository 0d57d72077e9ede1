// The seam between the torch backends' front end (patterns, listing; inside collage_core)
// and their kernels (libcollage_torch.so, the only code that links libtorch). Debian's
// libtorch drags ~290 shared libraries (OpenCV, GDAL, Qt...) into a process and takes
// seconds to start, so collage_core dlopen()s the plugin on the first compile only.
#pragma once

#include <memory>

#include "collage/graph.h"
#include "collage/kernel.h"

namespace collage::torch_backend {

// Bumped when this struct or what it points to changes.
constexpr int kPluginAbi = 2;  // 2: compile functions take the kernel's thread count

struct PluginApi {
  int abi = kPluginAbi;
  const char* torch_version = nullptr;  // TORCH_VERSION the plugin was built against
  // Throw collage::Error (kUnsupported with the reason) for what they cannot run. The kernel
  // runs ATen with `threads` intra-op threads on its calling thread.
  std::unique_ptr<Kernel> (*compile_ops)(const Graph& subgraph, int threads) = nullptr;
  std::unique_ptr<Kernel> (*compile_region)(const Graph& subgraph, int threads) = nullptr;
};

}  // namespace collage::torch_backend

// The plugin's one export, found with dlsym.
extern "C" const collage::torch_backend::PluginApi* collage_torch_plugin_api();

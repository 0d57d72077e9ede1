// Small pieces every part of the xnnpack backend uses: status checking, operator and
// runtime ownership, and the library version string.
#pragma once

#include <xnnpack.h>

#include <memory>
#include <string>

#include "collage/error.h"

namespace collage::xnnpack {

// XNNPACK refusing a configuration (invalid/unsupported parameter) is kUnsupported, so the
// partitioner just skips that match; anything else is a kBackend failure.
void check_status(xnn_status status, const char* what);

const char* status_name(xnn_status status);

// pthreadpool's workers spin ~10^6 iterations after each parallel call before sleeping. In a
// plan that mixes backends the next kernel is usually another library's, whose own pool
// then shares the cores with spinning xnnpack workers (measured: a TorchScript region ran
// 30 ms alone, 50 ms right after an xnnpack kernel). So every operator and runtime yields
// its workers as soon as it is done: a futex wake-up per kernel costs far less.
inline constexpr uint32_t kOperatorFlags = XNN_FLAG_YIELD_WORKERS;

struct OperatorDeleter {
  void operator()(xnn_operator_t op) const { xnn_delete_operator(op); }
};
using OperatorPtr = std::unique_ptr<xnn_operator, OperatorDeleter>;

struct RuntimeDeleter {
  void operator()(xnn_runtime_t runtime) const { xnn_delete_runtime(runtime); }
};
using RuntimePtr = std::unique_ptr<xnn_runtime, RuntimeDeleter>;

struct SubgraphDeleter {
  void operator()(xnn_subgraph_t subgraph) const { xnn_delete_subgraph(subgraph); }
};
using SubgraphPtr = std::unique_ptr<xnn_subgraph, SubgraphDeleter>;

// XNNPACK has no version call: CMake passes in the Debian package version.
std::string library_version();
// What both backends report as their version (part of every cost key): the library's, with
// collage's kernel revision, bumped when what a subgraph compiles to changes.
std::string backend_version();

}  // namespace collage::xnnpack

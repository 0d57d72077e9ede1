// What the `xnnpack` and `xnnpack-graph` backends share beyond kernels: the listing facts
// and the pools they run on.
#pragma once

#include <string>
#include <vector>

#include "backends/xnnpack/thread_pool.h"
#include "backends/xnnpack/xnn_common.h"

namespace collage::xnnpack {

std::vector<std::string> backend_details();
// Throws Error(kBackend) when XNNPACK could not be initialised on this machine.
void require_available();

}  // namespace collage::xnnpack

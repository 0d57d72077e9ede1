#include "backends/xnnpack/backend_common.h"

namespace collage::xnnpack {

std::vector<std::string> backend_details() {
  XnnpackContext& context = XnnpackContext::get();
  if (!context.initialized()) return {"xnn_initialize failed: " + context.init_error()};
  return {"XNNPACK " + library_version() + " (Debian package)",
          "layout: NHWC inside kernels, NCHW<->NHWC transposes at kernel boundaries",
          "pthreadpool: one per kernel thread count, shared by the kernels of that count"};
}

void require_available() {
  XnnpackContext& context = XnnpackContext::get();
  if (!context.initialized())
    fail(ErrorKind::kBackend, "xnnpack: xnn_initialize failed: {}", context.init_error());
}

}  // namespace collage::xnnpack

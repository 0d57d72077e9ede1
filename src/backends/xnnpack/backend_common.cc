#include "backends/xnnpack/backend_common.h"

#include "collage/session.h"

namespace collage::xnnpack {

std::vector<std::string> backend_details() {
  XnnpackContext& context = XnnpackContext::get();
  if (!context.initialized()) return {"xnn_initialize failed: " + context.init_error()};
  return {"XNNPACK " + library_version() + " (Debian package)",
          "layout: NHWC inside kernels, NCHW<->NHWC transposes at kernel boundaries",
          "pthreadpool threads: " + std::to_string(context.pool()->threads())};
}

void set_backend_threads(int threads) {
  XnnpackContext::get().set_threads(threads > 0 ? threads : thread_budget());
}

void require_available() {
  XnnpackContext& context = XnnpackContext::get();
  if (!context.initialized())
    fail(ErrorKind::kBackend, "xnnpack: xnn_initialize failed: {}", context.init_error());
}

}  // namespace collage::xnnpack

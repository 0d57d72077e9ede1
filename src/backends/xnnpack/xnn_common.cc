#include "backends/xnnpack/xnn_common.h"

namespace collage::xnnpack {

const char* status_name(xnn_status status) {
  switch (status) {
    case xnn_status_success:
      return "success";
    case xnn_status_uninitialized:
      return "uninitialized";
    case xnn_status_invalid_parameter:
      return "invalid parameter";
    case xnn_status_invalid_state:
      return "invalid state";
    case xnn_status_unsupported_parameter:
      return "unsupported parameter";
    case xnn_status_unsupported_hardware:
      return "unsupported hardware";
    case xnn_status_out_of_memory:
      return "out of memory";
  }
  return "unknown status";
}

void check_status(xnn_status status, const char* what) {
  if (status == xnn_status_success) return;
  ErrorKind kind =
      status == xnn_status_invalid_parameter || status == xnn_status_unsupported_parameter
          ? ErrorKind::kUnsupported
          : ErrorKind::kBackend;
  fail(kind, "XNNPACK {}: {}", what, status_name(status));
}

std::string library_version() {
#ifdef COLLAGE_XNNPACK_VERSION
  return COLLAGE_XNNPACK_VERSION;
#else
  return "unknown";
#endif
}

std::string backend_version() {
  // 1: in a region, a 4-D constant broadcast into a result of another rank keeps its order
  // (it was reordered to NHWC: Swin-T's attention mask failed at setup); a failure cached for
  // it is tried again.
  constexpr int kKernelRevision = 1;
  return library_version() + "+r" + std::to_string(kKernelRevision);
}

}  // namespace collage::xnnpack

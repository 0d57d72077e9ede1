#include "backends/cublas/cublas_lt.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>

#include "collage/error.h"

namespace collage::cublas_backend {
namespace {

struct Loaded {
  LtApi api;
  std::string error;  // "" when loaded
};

const Loaded& loaded() {
  static const Loaded l = [] {
    Loaded out;
    // The library the build found first (CMake passes its path), then the soname.
    void* handle = nullptr;
    std::string tried;
    for (const char* name : {COLLAGE_CUBLASLT_PATH, COLLAGE_CUBLASLT_SONAME}) {
      handle = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
      if (handle) break;
      tried += fmt::format("{}{}: {}", tried.empty() ? "" : "; ", name, dlerror());
    }
    if (!handle) {
      out.error = "cannot load cuBLASLt (" + tried + ")";
      return out;
    }
    auto get = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, symbol));
      if (!fn && out.error.empty()) out.error = fmt::format("cuBLASLt lacks {}", symbol);
    };
    LtApi& a = out.api;
    get(a.create, "cublasLtCreate");
    get(a.get_version, "cublasLtGetVersion");
    get(a.status_string, "cublasLtGetStatusString");
    get(a.desc_create, "cublasLtMatmulDescCreate");
    get(a.desc_destroy, "cublasLtMatmulDescDestroy");
    get(a.desc_set, "cublasLtMatmulDescSetAttribute");
    get(a.layout_create, "cublasLtMatrixLayoutCreate");
    get(a.layout_destroy, "cublasLtMatrixLayoutDestroy");
    get(a.layout_set, "cublasLtMatrixLayoutSetAttribute");
    get(a.pref_create, "cublasLtMatmulPreferenceCreate");
    get(a.pref_destroy, "cublasLtMatmulPreferenceDestroy");
    get(a.pref_set, "cublasLtMatmulPreferenceSetAttribute");
    get(a.heuristic, "cublasLtMatmulAlgoGetHeuristic");
    get(a.matmul, "cublasLtMatmul");
    return out;
  }();
  return l;
}

}  // namespace

const LtApi& lt() {
  const Loaded& l = loaded();
  if (!l.error.empty()) fail(ErrorKind::kBackend, "cublas: {}", l.error);
  return l.api;
}

bool lt_loadable(std::string* reason) {
  const Loaded& l = loaded();
  if (reason) *reason = l.error;
  return l.error.empty();
}

void check(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const char* text = lt_loadable(nullptr) ? lt().status_string(status) : "";
  fail(ErrorKind::kBackend, "cublas: {}: {} ({})", what, text, static_cast<int>(status));
}

}  // namespace collage::cublas_backend

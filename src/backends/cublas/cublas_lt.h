// cuBLASLt, loaded with dlopen on first use. The library is 540 MB: linked, it adds ~0.15 s
// to the start of every process (measured here), which every CLI call and every one of the
// ~600 ctest processes would pay whether or not it ever touches a GPU. Its functions are
// reached through this table, typed from cublasLt.h itself.
#pragma once

#include <cublasLt.h>

#include <string>

namespace collage::cublas_backend {

struct LtApi {
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtGetVersion) get_version = nullptr;
  decltype(&cublasLtGetStatusString) status_string = nullptr;
  decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&cublasLtMatrixLayoutSetAttribute) layout_set = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
};

// The table, loading the library on the first call; Error(kBackend) naming the library and
// dlerror() when it cannot be loaded.
const LtApi& lt();
// Whether the library loads here (for available()); why not in `reason`.
bool lt_loadable(std::string* reason);
// Error(kBackend) "what: cuBLASLt's message" unless `status` is CUBLAS_STATUS_SUCCESS.
void check(cublasStatus_t status, const char* what);

}  // namespace collage::cublas_backend

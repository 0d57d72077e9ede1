// The OpenMP runtime in use (openmp_runtime.h says why it matters).
#include "util/openmp_runtime.h"

#include <dlfcn.h>

#include <string_view>

namespace collage {

std::string openmp_runtime() {
  // The definition every call binds to: the first in the global lookup order, which is a
  // preloaded libomp's when there is one (libgomp itself is loaded by the libraries that
  // need it either way).
  void* symbol = dlsym(RTLD_DEFAULT, "omp_get_max_threads");
  Dl_info info{};
  if (!symbol || !dladdr(symbol, &info) || !info.dli_fname) return "";
  std::string_view file = info.dli_fname;
  file = file.substr(file.rfind('/') + 1);
  if (file.starts_with("libomp") || file.starts_with("libiomp")) return "libomp";
  if (file.starts_with("libgomp")) return "libgomp";
  return std::string(file.substr(0, file.find(".so")));
}

}  // namespace collage

// PYBIND11_MODULE for `collage._collage`; the package's __init__.py re-exports it.
#include "bindings.h"

PYBIND11_MODULE(_collage, m) {
  m.doc() = "collage: runs ONNX models fastest by mixing backends (C++ extension)";
  collage::python::bind_errors(m);
  collage::python::bind_library(m);
  collage::python::bind_plan(m);
  collage::python::bind_session(m);
}

namespace collage::python {

std::mutex& compile_mutex() {
  static std::mutex mutex;
  return mutex;
}

}  // namespace collage::python

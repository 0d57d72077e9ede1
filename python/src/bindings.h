// The pieces of the `collage._collage` extension module, one file each, over the public C++
// API (include/collage). The module holds no logic of its own beyond converting arguments,
// arrays and errors; see docs/DESIGN.md, "Python module".
#pragma once

#include <pybind11/pybind11.h>

#include <mutex>

namespace collage::python {

namespace py = pybind11;

// collage.Error and one subclass per collage::ErrorKind, and the translator that raises them.
void bind_errors(py::module_& m);
// backends(), zoo(), zoo_models(), version(), load_backend_plugin(), set_log_level().
void bind_library(py::module_& m);
// InferenceSession and NodeArg.
void bind_session(py::module_& m);
// Plan, PlanGroup, TuneReport, PlanTiming, TuneProgress and tune().
void bind_plan(py::module_& m);

// Compiling kernels (a session, a tune) touches backend-wide state (JIT caches, the thread
// budget, the measure worker): one at a time per process. Runs are not under this lock.
std::mutex& compile_mutex();

}  // namespace collage::python

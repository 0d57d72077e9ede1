// collage::Error -> Python: collage.Error with one subclass per ErrorKind. The message is
// the C++ message (what the CLI prints after "collage: KIND: "), `kind` is the CLI's kind
// text ("parse error", "invalid argument"...), `bad_input` says whether the CLI would exit
// with status 2 (the caller's input) rather than 1 (a bug or a backend failure).
#include <pybind11/pybind11.h>

#include <map>

#include "bindings.h"
#include "collage/error.h"

namespace collage::python {
namespace {

struct KindClass {
  ErrorKind kind;
  const char* name;
  PyObject* extra_base;  // a builtin it also derives from, so `except ValueError` works too
  const char* doc;
};

// Owned for the life of the process: exception classes outlive any module teardown order.
std::map<ErrorKind, PyObject*>& classes() {
  static auto* map = new std::map<ErrorKind, PyObject*>();
  return *map;
}

PyObject* new_class(const char* name, PyObject* bases, const char* doc, ErrorKind* kind) {
  py::dict attrs;
  if (kind) {
    attrs["kind"] = error_kind_name(*kind);
    attrs["bad_input"] = Error(*kind, "").is_bad_input();
  }
  std::string qualified = std::string("collage.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, attrs.ptr());
  if (!cls) throw py::error_already_set();
  return cls;
}

}  // namespace

void bind_errors(py::module_& m) {
  PyObject* base = new_class("Error", PyExc_Exception,
                             "Base of every error collage raises; `kind` and `bad_input` say "
                             "which (see the subclasses).",
                             nullptr);
  m.add_object("Error", py::handle(base));
  const KindClass kinds[] = {
      {ErrorKind::kParse, "ParseError", nullptr,
       "Bytes that are not a valid ONNX protobuf, TensorProto or plan JSON."},
      {ErrorKind::kInvalidModel, "InvalidModelError", nullptr,
       "A well-formed model whose graph is inconsistent (cycles, dangling names...)."},
      {ErrorKind::kUnsupported, "UnsupportedError", nullptr,
       "An op, dtype or attribute value collage cannot run."},
      {ErrorKind::kShape, "ShapeError", nullptr,
       "Shapes that do not agree, or that cannot be made static."},
      {ErrorKind::kLimit, "LimitError", nullptr, "A tensor or graph beyond a size guard."},
      {ErrorKind::kPathViolation, "PathViolationError", nullptr,
       "External data pointing outside the model's folder."},
      {ErrorKind::kIo, "IoError", PyExc_OSError, "A file that cannot be read or written."},
      {ErrorKind::kBackend, "BackendError", nullptr,
       "A backend failed to compile or run a kernel."},
      {ErrorKind::kInvalidArgument, "InvalidArgumentError", PyExc_ValueError,
       "A bad argument: an unknown input name, a wrong dtype or shape, a plan for another "
       "model..."},
      {ErrorKind::kInternal, "InternalError", nullptr, "A bug in collage."},
  };
  for (const KindClass& k : kinds) {
    py::tuple bases = k.extra_base ? py::make_tuple(py::handle(base), py::handle(k.extra_base))
                                   : py::make_tuple(py::handle(base));
    ErrorKind kind = k.kind;
    PyObject* cls = new_class(k.name, bases.ptr(), k.doc, &kind);
    classes()[k.kind] = cls;
    m.add_object(k.name, py::handle(cls));
  }
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      PyErr_SetString(classes().at(e.kind()), e.what());
    }
  });
}

}  // namespace collage::python

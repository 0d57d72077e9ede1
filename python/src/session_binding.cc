// collage.InferenceSession: ONNX Runtime's InferenceSession shape over collage::Session, so
// code written for ORT ports by changing the import. Inputs are used in place (the runtime
// copies them into its arena, once); outputs are handed to numpy without a copy.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <mutex>

#include "bindings.h"
#include "collage/session.h"
#include "numpy_tensor.h"
#include "plan_handle.h"

namespace collage::python {
namespace {

// ORT's NodeArg: what get_inputs()/get_outputs() return.
struct NodeArg {
  std::string name;
  std::vector<int64_t> shape;
  std::string type;
};

std::string join_names(const Graph& g, const std::vector<ValueId>& ids) {
  std::string out;
  for (ValueId id : ids) out += (out.empty() ? "'" : ", '") + g.value(id).name + "'";
  return out;
}

// ORT code passes providers=[...]: accepted so it ports unchanged, since collage picks its
// backends by measurement. Asking for anything but the CPU gets a warning, not silence.
void warn_about_providers(const py::object& providers) {
  if (providers.is_none()) return;
  for (const py::handle& p : providers) {
    // An entry is a name or a (name, options) pair.
    std::string name = py::str(py::isinstance<py::tuple>(p) ? p.cast<py::tuple>()[0] : p);
    if (name != "CPUExecutionProvider" &&
        PyErr_WarnEx(PyExc_UserWarning,
                     ("collage ignores providers=: it runs on this machine's CPU backends "
                      "(collage.backends()), not " +
                      name)
                         .c_str(),
                     1) != 0)
      throw py::error_already_set();
  }
}

class InferenceSession {
 public:
  InferenceSession(const py::object& model, const py::object& plan, int threads,
                   const std::optional<std::map<std::string, int64_t>>& dims,
                   const std::optional<std::string>& backend, const py::object& providers) {
    warn_about_providers(providers);
    SessionOptions options;
    options.threads = threads;
    if (dims) options.load.dims = *dims;
    options.backend = backend ? *backend : "";  // "": everything on the fallback
    std::optional<Plan> the_plan;
    if (py::isinstance<PlanHandle>(plan))
      the_plan = plan.cast<const PlanHandle&>().plan;
    else if (!plan.is_none())
      the_plan = Plan::load(py::str(py::module_::import("os").attr("fspath")(plan)));
    bool from_bytes = py::isinstance<py::bytes>(model);
    std::string source =
        from_bytes ? std::string(model.cast<py::bytes>())
                   : std::string(py::str(py::module_::import("os").attr("fspath")(model)));
    model_path_ = from_bytes ? "" : source;
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(compile_mutex());
    Graph graph = from_bytes ? load_model_from_bytes(source, "", options.load)
                             : load_model(source, options.load);
    session_ = the_plan ? std::make_unique<Session>(std::move(graph), *the_plan, options)
                        : std::make_unique<Session>(std::move(graph), options);
  }

  std::vector<NodeArg> node_args(const std::vector<ValueId>& ids) const {
    std::vector<NodeArg> out;
    for (ValueId id : ids) {
      const Value& v = session_->graph().value(id);
      out.push_back({v.name, v.shape, ort_type_name(v.dtype)});
    }
    return out;
  }
  std::vector<NodeArg> inputs() const { return node_args(session_->graph().inputs); }
  std::vector<NodeArg> outputs() const { return node_args(session_->graph().outputs); }

  py::list run(const py::object& output_names, const py::dict& feed,
               const py::object& run_options) {
    if (!run_options.is_none())
      fail(ErrorKind::kInvalidArgument, "run_options is not supported by collage (pass None)");
    const Graph& g = session_->graph();
    // Which outputs, in the caller's order.
    std::vector<size_t> wanted;
    if (output_names.is_none()) {
      for (size_t i = 0; i < g.outputs.size(); ++i) wanted.push_back(i);
    } else {
      if (py::isinstance<py::str>(output_names))
        fail(ErrorKind::kInvalidArgument,
             "output_names must be a list of output names or None, not a string");
      for (const py::handle& name : output_names) {
        std::string n = py::str(name);
        size_t i = 0;
        while (i < g.outputs.size() && g.value(g.outputs[i]).name != n) ++i;
        if (i == g.outputs.size())
          fail(ErrorKind::kInvalidArgument, "unknown output '{}' (the model's outputs: {})", n,
               join_names(g, g.outputs));
        wanted.push_back(i);
      }
    }
    // Inputs by name, in graph order; arrays kept referenced until the run is over.
    for (const auto& [key, value] : feed) {
      std::string n = py::str(key);
      bool known = false;
      for (ValueId id : g.inputs) known = known || g.value(id).name == n;
      if (!known)
        fail(ErrorKind::kInvalidArgument, "unknown input '{}' (the model's inputs: {})", n,
             join_names(g, g.inputs));
    }
    std::vector<py::array> arrays;
    std::vector<Tensor> inputs;
    for (ValueId id : g.inputs) {
      const Value& v = g.value(id);
      py::str key(v.name);
      if (!feed.contains(key))
        fail(ErrorKind::kInvalidArgument, "missing input '{}' ({} {})", v.name,
             ort_type_name(v.dtype), shape_to_string(v.shape));
      // A C-contiguous array is used as is; anything else (a strided view, a list) is made
      // into one by numpy first.
      PyObject* raw = PyArray_FromAny_contiguous(feed[key]);
      if (!raw)
        fail(ErrorKind::kInvalidArgument, "input '{}' is not convertible to a numpy array: {}",
             v.name, fetch_python_error());
      py::array array = py::reinterpret_steal<py::array>(raw);
      std::optional<DType> dtype = dtype_from_numpy(array.dtype());
      if (!dtype)
        fail(ErrorKind::kInvalidArgument,
             "input '{}' has numpy dtype {}, which collage cannot hold", v.name,
             std::string(py::str(array.dtype())));
      // The runtime checks dtype and shape against the model (the CLI's message).
      inputs.push_back(view_of(array, *dtype));
      arrays.push_back(std::move(array));
    }
    std::vector<Tensor> outputs;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(run_mutex_);
      outputs = session_->run(inputs);
    }
    py::list result;
    for (size_t i : wanted) result.append(to_numpy(outputs[i]));
    return result;
  }

  std::vector<std::string> providers() const {
    std::vector<std::string> names;
    for (const PlanGroup& g : session_->plan().groups)
      if (std::find(names.begin(), names.end(), g.backend) == names.end())
        names.push_back(g.backend);
    return names;
  }

  PlanHandle plan() const {
    PlanHandle h;
    h.plan = session_->plan();
    if (!model_path_.empty()) h.model = model_path_;
    return h;
  }

  size_t num_steps() const { return session_->num_steps(); }
  size_t arena_bytes() const { return session_->arena_bytes(); }

 private:
  static PyObject* PyArray_FromAny_contiguous(const py::handle& obj) {
    return py::detail::npy_api::get().PyArray_FromAny_(
        obj.ptr(), nullptr, 0, 0,
        py::detail::npy_api::NPY_ARRAY_ENSUREARRAY_ | py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_,
        nullptr);
  }
  static std::string fetch_python_error() {
    py::error_already_set e;
    return e.what();
  }

  std::unique_ptr<Session> session_;
  std::string model_path_;
  std::mutex run_mutex_;  // one arena: runs of one session take turns
};

}  // namespace

void bind_session(py::module_& m) {
  py::class_<NodeArg>(m, "NodeArg", "An input or output of a model, as ONNX Runtime describes it.")
      .def_readonly("name", &NodeArg::name)
      .def_readonly("shape", &NodeArg::shape)
      .def_readonly("type", &NodeArg::type, "ONNX Runtime's type text, e.g. 'tensor(float)'")
      .def("__repr__", [](const NodeArg& a) {
        return "NodeArg(name=" + std::string(py::repr(py::str(a.name))) + ", type='" + a.type +
               "', shape=" + std::string(py::repr(py::cast(a.shape))) + ")";
      });

  py::class_<InferenceSession>(m, "InferenceSession", R"doc(
A model loaded and compiled for running, like onnxruntime.InferenceSession.

InferenceSession(path, plan=None, threads=0, dims=None, backend=None)

path:    an ONNX file (str or os.PathLike), or the model's bytes.
plan:    a Plan (from collage.tune or Plan.load) or the path of a plan JSON file; without
         one every node runs on `backend` where it can and on "reference" elsewhere.
threads: thread budget of every backend (0 = every CPU this process may use).
dims:    values of symbolic input dimensions, {"batch": 1}.
backend: with no plan, the backend to run on (default "reference", the slow oracle: tune
         the model and pass the plan for speed).
providers, sess_options, provider_options: ONNX Runtime's, accepted so ported code runs
         unchanged, and ignored (a warning for a provider other than the CPU's).
)doc")
      .def(py::init([](const py::object& path, const py::object& plan, int threads,
                       const std::optional<std::map<std::string, int64_t>>& dims,
                       const std::optional<std::string>& backend, const py::object& providers,
                       const py::object&, const py::object&) {
             return std::make_unique<InferenceSession>(path, plan, threads, dims, backend,
                                                       providers);
           }),
           py::arg("path"), py::arg("plan") = py::none(), py::arg("threads") = 0,
           py::arg("dims") = py::none(), py::arg("backend") = py::none(), py::kw_only(),
           py::arg("providers") = py::none(), py::arg("sess_options") = py::none(),
           py::arg("provider_options") = py::none())
      .def("get_inputs", &InferenceSession::inputs, "The model's inputs, in order (NodeArg).")
      .def("get_outputs", &InferenceSession::outputs, "The model's outputs, in order (NodeArg).")
      .def("run", &InferenceSession::run, py::arg("output_names"), py::arg("input_feed"),
           py::arg("run_options") = py::none(), R"doc(
Runs the model. output_names: a list of output names, or None for all of them, in order.
input_feed: {input name: numpy array} with exactly each input's dtype and shape (no
implicit casts). Returns a list of numpy arrays. The GIL is released while it runs.)doc")
      .def("get_providers", &InferenceSession::providers,
           "The backends this session runs nodes on, in order of first use.")
      .def_property_readonly("plan", &InferenceSession::plan,
                             "The placement this session runs (a Plan without costs).")
      .def_property_readonly("num_steps", &InferenceSession::num_steps, "Kernels launched per run.")
      .def_property_readonly("arena_bytes", &InferenceSession::arena_bytes,
                             "Bytes of the arena holding every intermediate value.");
}

}  // namespace collage::python

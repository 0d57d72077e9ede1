// Module-level functions: backends(), zoo(), zoo_models(), version(), plugins, logging.
#include <pybind11/stl.h>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <optional>

#include "bindings.h"
#include "collage/backend.h"
#include "collage/model.h"
#include "collage/placement_view.h"
#include "collage/version.h"
#include "library_state.h"
#include "models/zoo.h"
#include "search/isolated_measurer.h"

namespace collage::python {
namespace {

struct BackendInfo {
  std::string name, version, kind, threads, color;
  bool available = true;
  std::string unavailable_reason;     // "" when available
  std::optional<std::string> device;  // the device its kernels run on; None: the host
  std::vector<std::string> details;
  size_t patterns = 0, fusion_rules = 0;
};

struct State {
  std::string cli;  // "" when the module has no CLI beside it
  std::vector<std::string> plugins;
};
State& state() {
  static auto* s = new State();
  return *s;
}

std::vector<BackendInfo> backends() {
  std::vector<BackendInfo> out;
  for (Backend* b : BackendRegistry::global().all())
    out.push_back({b->name(), b->version(), backend_kind_name(b->kind()), b->thread_model(),
                   backend_color(b->name()), b->available(),
                   b->available() ? "" : b->unavailable_reason(),
                   b->device() ? std::optional<std::string>(b->device()->name()) : std::nullopt,
                   b->details(), b->patterns().size(), b->fusion_rules().size()});
  return out;
}

std::string zoo(const std::string& name, const py::object& path, uint64_t seed) {
  std::string out = path.is_none()
                        ? name + ".onnx"
                        : std::string(py::str(py::module_::import("os").attr("fspath")(path)));
  py::gil_scoped_release release;
  save_model(models::build_zoo_model(name, seed), out);
  return out;
}

}  // namespace

void configure_measure_worker() {
  if (!state().cli.empty()) set_measure_worker_command({state().cli, state().plugins});
}

void bind_library(py::module_& m) {
  // Diagnostics (spdlog's warnings: a plan tuned on another machine...) go to stderr, never
  // into a program's stdout.
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "", std::make_shared<spdlog::sinks::stderr_color_sink_mt>()));
  spdlog::set_level(spdlog::level::warn);

  py::class_<BackendInfo>(m, "BackendInfo", "A registered backend (collage.backends()).")
      .def_readonly("name", &BackendInfo::name)
      .def_readonly("version", &BackendInfo::version, "its library's version")
      .def_readonly("kind", &BackendInfo::kind, "'op-level' or 'graph-level'")
      .def_readonly("threads", &BackendInfo::threads, "how it uses threads")
      .def_readonly("available", &BackendInfo::available, "False when it cannot run here")
      .def_readonly("unavailable_reason", &BackendInfo::unavailable_reason,
                    "why it cannot run here ('' when it can), e.g. no CUDA device")
      .def_readonly("device", &BackendInfo::device,
                    "the device its kernels run on ('cuda:0'), None for the host")
      .def_readonly("details", &BackendInfo::details)
      .def_readonly("patterns", &BackendInfo::patterns, "number of patterns it claims")
      .def_readonly("fusion_rules", &BackendInfo::fusion_rules)
      .def_readonly("color", &BackendInfo::color, "its colour in placement drawings")
      .def("__repr__", [](const BackendInfo& b) {
        return "<collage.BackendInfo " + b.name + " " + b.version + " (" + b.kind +
               (b.available ? "" : ", not available") + ")>";
      });

  m.def("backends", &backends, "Every registered backend, reference first.");
  m.def(
      "version", [] { return std::string(version()); }, "collage's version.");
  m.def("zoo", &zoo, py::arg("name"), py::arg("path") = py::none(),
        py::arg("seed") = models::kZooSeed, R"doc(
Writes the built-in model `name` (see zoo_models()) as ONNX to `path` (default NAME.onnx)
and returns the path. Weights are random from `seed`, so the file is the same everywhere.)doc");
  m.def(
      "zoo_models",
      [] {
        py::dict out;
        for (const models::ZooModel& z : models::zoo_models()) out[py::str(z.name)] = z.description;
        return out;
      },
      "{name: description} of the built-in models, the paper's full-size workloads first.");
  m.def(
      "load_backend_plugin",
      [](const std::string& path) {
        std::string absolute = std::filesystem::absolute(path).string();
        py::gil_scoped_release release;
        std::lock_guard<std::mutex> lock(compile_mutex());
        BackendRegistry::global().load_plugin(absolute);
        state().plugins.push_back(absolute);
      },
      py::arg("path"), "Loads third-party backends from a shared library (--backend-plugin).");
  m.def(
      "set_log_level",
      [](const std::string& level) {
        // from_str reads any unknown name as "off": refuse those instead.
        spdlog::level::level_enum parsed = spdlog::level::from_str(level);
        if (parsed == spdlog::level::off && level != "off")
          fail(ErrorKind::kInvalidArgument,
               "log level must be trace, debug, info, warn, error or off, got '{}'", level);
        spdlog::set_level(parsed);
      },
      py::arg("level"), "trace, debug, info, warn (the default), error or off.");
  m.def(
      "_set_measure_worker",
      [](const std::string& cli) {
        // Never wait for compile_mutex holding the GIL: a tune holding the mutex takes the
        // GIL in its progress callback.
        py::gil_scoped_release release;
        std::lock_guard<std::mutex> lock(compile_mutex());
        state().cli = cli;
      },
      py::arg("cli"), "Internal: the collage CLI that measures candidates in isolation.");
}

}  // namespace collage::python

// collage_conformance: runs ONNX test folders (model.onnx + test_data_set_N/{input,output}_K.pb)
// through a Session and checks the outputs against the expected ones.
//
// Each test runs in a forked child by default, so a crash or a hang in one kernel is reported
// as that test's failure instead of taking the whole suite down with it.
//
// With --backend NAME the session is strict (a compile error other than kUnsupported fails
// the test instead of falling back), and each test records how many nodes the backend ran
// against how many its patterns match. A test "passed on the backend" when it passed with
// the backend running at least one node (the fallback backend: when it passed). --passing
// FILE is the ratchet: every test listed there must pass on the backend; tests passing on
// it that are not listed are printed as NEW, to be added (--write-passing FILE writes the
// list of this run).

#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "collage/backend.h"
#include "collage/error.h"
#include "collage/model.h"
#include "collage/session.h"
#include "runtime/partitioner.h"
#include "util/compare.h"

namespace fs = std::filesystem;

namespace collage::conformance {
namespace {

enum class Status { kPassed, kFailed, kUnsupported };

const char* status_name(Status s) {
  switch (s) {
    case Status::kPassed:
      return "passed";
    case Status::kFailed:
      return "failed";
    case Status::kUnsupported:
      return "unsupported";
  }
  return "?";
}

// The backend's name in NAME or NAME/VARIANT (--backend onednn/winograd).
std::string backend_name(const std::string& backend) {
  return BackendSpec::parse(backend).backend;
}

struct Result {
  Status status = Status::kFailed;
  std::string reason;
  // Nodes the backend ran, and nodes its patterns match (over the test's data sets' sessions).
  BackendCoverage coverage;
  // A kernel of the session was built as a variant (--backend NAME/VARIANT).
  bool ran_variant = false;
};

struct TestCase {
  std::string name;  // suite/test_x for suites, the path as given for --dir
  fs::path dir;
};

struct Config {
  std::string backend = "reference";
  int threads = 0;
  Tolerance tol;
  // A passed test whose session ran none of the nodes the backend's patterns match fails.
  bool require_backend_nodes = false;
};

bool is_fallback(const std::string& backend) {
  return BackendRegistry::global().is_fallback(BackendRegistry::global().get(backend));
}

Result failed(std::string reason) {
  return {Status::kFailed, std::move(reason)};
}

// The single place that decides how an exception counts: kUnsupported is an honest "collage
// cannot run this"; every other error, whatever its kind, is a failure to investigate.
Result classify_current_exception(const std::string& stage) {
  try {
    throw;
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kUnsupported) return {Status::kUnsupported, stage + ": " + e.what()};
    return failed(fmt::format("{}: [{}] {}", stage, error_kind_name(e.kind()), e.what()));
  } catch (const std::exception& e) {
    return failed(fmt::format("{}: exception: {}", stage, e.what()));
  } catch (...) {
    return failed(stage + ": unknown exception");
  }
}

// test_data_set_N folders in numeric order (test_data_set_10 after test_data_set_9).
std::vector<fs::path> list_data_sets(const fs::path& dir) {
  std::vector<std::pair<long, fs::path>> sets;
  const std::string prefix = "test_data_set_";
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.rfind(prefix, 0) != 0) continue;
    sets.emplace_back(std::strtol(name.c_str() + prefix.size(), nullptr, 10), entry.path());
  }
  std::sort(sets.begin(), sets.end());
  std::vector<fs::path> paths;
  for (auto& [index, path] : sets) paths.push_back(std::move(path));
  return paths;
}

// Reads <stem>_0.pb, <stem>_1.pb, ... up to the first index that does not exist.
std::vector<Tensor> read_numbered(const fs::path& dir, const std::string& stem) {
  std::vector<Tensor> tensors;
  for (int k = 0;; ++k) {
    const fs::path path = dir / fmt::format("{}_{}.pb", stem, k);
    if (!fs::exists(path)) break;
    tensors.push_back(read_tensor_file(path.string()));
  }
  return tensors;
}

// numpy has no bfloat16, so ONNX's test generator stores bfloat16 data as uint16 bit patterns.
// Seen where the model declares bfloat16, such data is reinterpreted (a view: `t` must outlive
// it); anything else is left for the session or the comparison to reject.
Tensor as_declared(const Tensor& t, DType declared) {
  if (t.dtype() == DType::kUInt16 && declared == DType::kBFloat16)
    return Tensor::view(DType::kBFloat16, t.shape(), t.raw());
  return t;
}

Graph load_freezing_if_needed(const std::string& model, LoadOptions load,
                              const std::vector<std::string>& names,
                              const std::vector<Tensor>& values, bool* frozen);

Result run_test_unguarded(const TestCase& test, const Config& config) {
  const fs::path model = test.dir / "model.onnx";
  if (!fs::exists(model)) return failed("no model.onnx in " + test.dir.string());
  const std::vector<fs::path> sets = list_data_sets(test.dir);
  if (sets.empty()) return failed("no test_data_set_* folder");

  std::vector<std::string> input_names;
  try {
    input_names = model_input_names(model.string());
  } catch (...) {
    return classify_current_exception("reading model inputs");
  }

  std::optional<Session> session;
  bool ran_variant = false;
  std::vector<Shape> session_shapes;
  bool frozen = false;  // inputs were frozen to one data set's values: reload for the next
  BackendCoverage coverage;
  for (const fs::path& set : sets) {
    const std::string set_name = set.filename().string();
    std::vector<Tensor> inputs, expected;
    try {
      inputs = read_numbered(set, "input");
      expected = read_numbered(set, "output");
    } catch (...) {
      Result read_error = classify_current_exception(set_name + ": reading test data");
      // Sequence- or optional-typed test data is not a TensorProto, so the tensor reader
      // rejects it for an unrelated-sounding reason. When the model itself is unsupported,
      // the importer's reason is the one that says why.
      try {
        load_model(model.string());
      } catch (const Error& e) {
        if (e.kind() == ErrorKind::kUnsupported)
          return {Status::kUnsupported, std::string("load: ") + e.what()};
      } catch (...) {
      }
      return read_error;
    }
    if (inputs.size() != input_names.size())
      return failed(fmt::format("{}: {} input files for {} model inputs", set_name, inputs.size(),
                                input_names.size()));

    std::vector<Shape> shapes;
    for (const Tensor& t : inputs) shapes.push_back(t.shape());
    // Data sets of one test usually share shapes; reload only when they do not.
    if (!session || shapes != session_shapes || frozen) {
      SessionOptions options;
      options.backend = config.backend;
      options.threads = config.threads;
      options.strict = true;
      for (size_t i = 0; i < input_names.size(); ++i)
        options.load.input_shapes[input_names[i]] = shapes[i];
      session.reset();
      try {
        session.emplace(
            load_freezing_if_needed(model.string(), options.load, input_names, inputs, &frozen),
            options);
      } catch (...) {
        return classify_current_exception("load");
      }
      session_shapes = shapes;
      const BackendCoverage c = backend_coverage(
          session->graph(), BackendRegistry::global().get(backend_name(config.backend)),
          session->node_backends());
      coverage.matched = std::max(coverage.matched, c.matched);
      coverage.placed = std::max(coverage.placed, c.placed);
      for (const PlanGroup& g : session->plan().groups) ran_variant |= !g.variant.empty();
    }

    // The session wants its own input order; match the data to it by name.
    const Graph& graph = session->graph();
    std::vector<Tensor> ordered;
    for (ValueId id : graph.inputs) {
      const std::string& name = graph.value(id).name;
      const auto it = std::find(input_names.begin(), input_names.end(), name);
      if (it == input_names.end())
        return failed(fmt::format("session input '{}' is not a model input", name));
      ordered.push_back(as_declared(inputs[it - input_names.begin()], graph.value(id).dtype));
    }

    std::vector<Tensor> outputs;
    try {
      outputs = session->run(ordered);
    } catch (...) {
      return classify_current_exception(set_name + ": run");
    }
    if (outputs.size() != expected.size())
      return failed(
          fmt::format("{}: {} outputs, expected {}", set_name, outputs.size(), expected.size()));
    for (size_t k = 0; k < outputs.size(); ++k) {
      const Tensor want = as_declared(expected[k], outputs[k].dtype());
      const std::string diff = compare_tensors(outputs[k], want, config.tol);
      if (!diff.empty()) {
        const std::string name =
            k < graph.outputs.size() ? graph.value(graph.outputs[k]).name : "?";
        return failed(fmt::format("{}: output {} '{}': {}", set_name, k, name, diff));
      }
    }
  }
  if (config.require_backend_nodes && coverage.matched > 0 && coverage.placed == 0)
    return failed(fmt::format("{} ran none of the {} nodes its patterns match", config.backend,
                              coverage.matched));
  return {Status::kPassed, "", coverage, ran_variant};
}

// ONNX's node tests feed shape-setting values (a Reshape's target, Slice's starts, Resize's
// scales) as graph inputs. collage needs static shapes, so such values must be known at load
// time: when the plain load says so, freeze the integer inputs to the test's values, and if
// that is not enough, every input. Frozen inputs become constants; the rest still run.
Graph load_freezing_if_needed(const std::string& model, LoadOptions load,
                              const std::vector<std::string>& names,
                              const std::vector<Tensor>& values, bool* frozen) {
  auto needs_constant = [](const Error& e) {
    return e.kind() == ErrorKind::kShape &&
           std::string(e.what()).find("must be a constant") != std::string::npos;
  };
  *frozen = false;
  try {
    return load_model(model, load);
  } catch (const Error& e) {
    if (!needs_constant(e)) throw;
  }
  *frozen = true;
  for (size_t i = 0; i < names.size(); ++i)
    if (dtype_is_integer(values[i].dtype())) load.constant_inputs[names[i]] = values[i];
  try {
    return load_model(model, load);
  } catch (const Error& e) {
    if (!needs_constant(e)) throw;
  }
  for (size_t i = 0; i < names.size(); ++i) load.constant_inputs[names[i]] = values[i];
  return load_model(model, load);
}

// Anything that escapes (a filesystem error, say) is the test's failure, not the runner's.
Result run_test(const TestCase& test, const Config& config) {
  try {
    return run_test_unguarded(test, config);
  } catch (...) {
    return classify_current_exception("runner");
  }
}

bool write_all(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Runs the test in a child process; the child sends back one status byte, the coverage
// ("matched placed\n") and the reason.
Result run_isolated(const TestCase& test, const Config& config, int timeout_s) {
  int fds[2];
  if (pipe(fds) != 0) return failed(fmt::format("pipe: {}", std::strerror(errno)));
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return failed(fmt::format("fork: {}", std::strerror(errno)));
  }
  if (pid == 0) {
    close(fds[0]);
    if (timeout_s > 0) alarm(static_cast<unsigned>(timeout_s));
    const Result r = run_test(test, config);
    const std::string message = std::string{static_cast<char>('0' + static_cast<int>(r.status)),
                                            r.ran_variant ? '1' : '0'} +
                                fmt::format("{} {}\n", r.coverage.matched, r.coverage.placed) +
                                r.reason;
    // _exit: the parent's buffered stdio and atexit handlers are not the child's to run.
    _exit(write_all(fds[1], message) ? 0 : 3);
  }
  close(fds[1]);
  std::string message;
  char buffer[4096];
  for (;;) {
    const ssize_t n = read(fds[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    message.append(buffer, static_cast<size_t>(n));
  }
  close(fds[0]);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(wstatus)) {
    const int sig = WTERMSIG(wstatus);
    if (sig == SIGALRM) return failed(fmt::format("timed out after {} s", timeout_s));
    return failed(fmt::format("crashed: signal {} ({})", sig, strsignal(sig)));
  }
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0 || message.empty())
    return failed(fmt::format("child exited with status {} without a result",
                              WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1));
  const int code = message[0] - '0';
  BackendCoverage coverage;
  const size_t newline = message.find('\n');
  if (code < 0 || code > 2 || message.size() < 2 || newline == std::string::npos ||
      std::sscanf(message.c_str() + 2, "%zu %zu", &coverage.matched, &coverage.placed) != 2)
    return failed("garbled result from child");
  return {static_cast<Status>(code), message.substr(newline + 1), coverage, message[1] == '1'};
}

// Why `backend` cannot run on this machine ("" when it can, or is unknown: the tests then
// say so). Asked in a child process when tests are isolated: a GPU backend initialises CUDA
// to answer, and a child forked after that cannot use CUDA.
std::string unavailable_reason(const std::string& backend, bool in_child) {
  auto ask = [&]() -> std::string {
    Backend* b = BackendRegistry::global().find(backend);
    return b && !b->available() ? "backend '" + backend + "': " + b->unavailable_reason() : "";
  };
  if (!in_child) return ask();
  int fds[2];
  if (pipe(fds) != 0) return "";
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return "";
  }
  if (pid == 0) {
    close(fds[0]);
    _exit(write_all(fds[1], ask()) ? 0 : 3);
  }
  close(fds[1]);
  std::string message;
  char buffer[1024];
  for (ssize_t n; (n = read(fds[0], buffer, sizeof buffer)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    message.append(buffer, static_cast<size_t>(n));
  }
  close(fds[0]);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  return message;
}

// Exit status for "this backend cannot run here" (ctest's SKIP_RETURN_CODE of the GPU
// backends' entries): reported as skipped, never as passed.
constexpr int kSkipped = 77;

// Every test folder (one holding model.onnx) of a suite, sorted by name.
std::vector<TestCase> discover_suite(const fs::path& root, const std::string& suite) {
  const fs::path dir = root / suite;
  if (!fs::is_directory(dir))
    fail(ErrorKind::kIo, "suite '{}' not found: {} is not a directory", suite, dir.string());
  std::vector<TestCase> tests;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_directory() && fs::exists(entry.path() / "model.onnx"))
      tests.push_back({suite + "/" + entry.path().filename().string(), entry.path()});
  }
  std::sort(tests.begin(), tests.end(),
            [](const TestCase& a, const TestCase& b) { return a.name < b.name; });
  return tests;
}

// A list of tests (--passing): one name per line; '#' starts a comment.
std::set<std::string> read_list(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(ErrorKind::kIo, "cannot read the list {}", path);
  std::set<std::string> names;
  for (std::string line; std::getline(in, line);) {
    line = line.substr(0, line.find('#'));
    const size_t begin = line.find_first_not_of(" \t\r");
    if (begin == std::string::npos) continue;
    names.insert(line.substr(begin, line.find_last_not_of(" \t\r") - begin + 1));
  }
  return names;
}

void write_list(const std::string& path, const std::string& backend,
                const std::set<std::string>& names) {
  std::ofstream out(path);
  out << "# The ONNX conformance tests that pass with backend '" << backend
      << "' running at least one\n"
         "# node (tests/conformance/README.md). A test leaving this list fails its ctest;\n"
         "# add the new passes the run prints (or rewrite it with collage_conformance\n"
         "# --backend "
      << backend << " --write-passing FILE).\n";
  for (const std::string& name : names) out << name << "\n";
  if (!out) fail(ErrorKind::kIo, "cannot write the list {}", path);
}

int main_impl(int argc, char** argv) {
  CLI::App app{"Runs ONNX conformance test folders through collage and checks the outputs."};
  std::string data_root = "/usr/share/libonnx-testdata/data";
  std::vector<std::string> suites = {"node", "pytorch-converted", "pytorch-operator", "simple"};
  std::vector<std::string> dirs;
  std::string filter;
  std::string report_path;
  std::vector<std::string> plugins;
  std::string passing_path, write_passing_path;
  int min_passed = 0;
  int min_on_backend = 0;
  int min_variant = 0;
  int timeout_s = 300;
  bool no_isolate = false;
  bool verbose = false;
  Config config;
  app.add_option("--data-root", data_root, "Folder holding the suites (libonnx-testdata)")
      ->capture_default_str();
  auto* suite_opt = app.add_option("--suite", suites, "Comma-separated suites under --data-root")
                        ->delimiter(',')
                        ->capture_default_str();
  app.add_option("--dir", dirs,
                 "Test folders to run instead of (or with an explicit --suite, "
                 "besides) the suites");
  app.add_option("--backend", config.backend,
                 "Backend for the session (strict: a compile error other than 'unsupported' "
                 "fails the test)")
      ->capture_default_str();
  app.add_option("--backend-plugin", plugins, "Load backends from this plugin library first");
  app.add_option("--passing", passing_path,
                 "Fail unless every test listed in this file passes with the backend running "
                 "at least one node; print the ones passing that are not listed");
  app.add_option("--write-passing", write_passing_path,
                 "Write the tests that passed with the backend running at least one node here");
  app.add_option("--min-on-backend", min_on_backend,
                 "Fail unless at least this many tests pass with the backend running a node")
      ->capture_default_str();
  app.add_flag("--require-backend-nodes", config.require_backend_nodes,
               "Fail a test whose session runs none of the nodes the backend's patterns match");
  app.add_option("--filter", filter, "Run only tests whose name contains this");
  app.add_option("--min-passed", min_passed, "Fail unless at least this many tests pass")
      ->capture_default_str();
  app.add_option("--min-variant-passed", min_variant,
                 "Fail unless at least this many passed tests ran a kernel built as the "
                 "variant of --backend NAME/VARIANT (so a variant's run checks the variant)")
      ->capture_default_str();
  app.add_option("--report", report_path, "Write every test's status and reason as JSON here");
  app.add_option("--rtol", config.tol.rtol, "Relative tolerance for floats")->capture_default_str();
  app.add_option("--atol", config.tol.atol, "Absolute tolerance for floats")->capture_default_str();
  app.add_option("--threads", config.threads, "Session threads (0 = every core)")
      ->capture_default_str();
  app.add_option("--timeout", timeout_s, "Seconds a test may take (0 = no limit)")
      ->capture_default_str();
  app.add_flag("--no-isolate", no_isolate,
               "Run tests in this process (for a debugger; a crash ends the run)");
  app.add_flag("-v,--verbose", verbose, "Print each test before running it, and unsupported ones");
  CLI11_PARSE(app, argc, argv);

  if (std::string why = unavailable_reason(backend_name(config.backend), !no_isolate);
      !why.empty()) {
    fmt::print("conformance: SKIPPED: {}\n", why);
    return kSkipped;
  }

  int passed = 0, num_failed = 0, unsupported = 0, passed_variant = 0;
  int on_backend = 0;
  size_t nodes_matched = 0, nodes_placed = 0;
  auto summary = [&] {
    fmt::print("conformance: {} passed, {} failed, {} unsupported\n", passed, num_failed,
               unsupported);
    fmt::print(
        "conformance: {} passed with {} running a node; over the passed tests it ran {} of "
        "the {} nodes its patterns match\n",
        on_backend, config.backend, nodes_placed, nodes_matched);
    if (config.backend.find('/') != std::string::npos)
      fmt::print("conformance: {} passed tests ran a kernel built as {}\n", passed_variant,
                 config.backend);
    std::fflush(stdout);
  };

  std::vector<TestCase> tests;
  std::set<std::string> listed;
  bool fallback = false;
  try {
    for (const std::string& plugin : plugins) BackendRegistry::global().load_plugin(plugin);
    fallback = is_fallback(backend_name(config.backend));  // throws for an unknown backend
    if (!passing_path.empty()) listed = read_list(passing_path);
    const bool run_suites = dirs.empty() || suite_opt->count() > 0;
    if (run_suites) {
      if (!fs::is_directory(data_root))
        fail(ErrorKind::kIo,
             "ONNX test data not found at {} (install libonnx-testdata or pass --data-root)",
             data_root);
      for (const std::string& suite : suites) {
        auto found = discover_suite(data_root, suite);
        tests.insert(tests.end(), found.begin(), found.end());
      }
    }
    for (const std::string& dir : dirs) {
      if (!fs::is_directory(dir)) fail(ErrorKind::kIo, "--dir {} is not a directory", dir);
      tests.push_back({dir, fs::path(dir)});
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "collage_conformance: {}\n", e.what());
    summary();
    return 1;
  }
  std::set<std::string> discovered;
  for (const TestCase& t : tests) discovered.insert(t.name);
  if (!filter.empty())
    std::erase_if(tests,
                  [&](const TestCase& t) { return t.name.find(filter) == std::string::npos; });
  std::set<std::string> passed_on_backend;
  std::map<std::string, std::string> outcome;  // test -> how it ended, for the ratchet

  // Built once here, the loader's tables are inherited by every forked child (the reference
  // run over the four suites: 46 -> 24 s).
  prepare_model_loader();
  nlohmann::json report = nlohmann::json::array();
  for (const TestCase& test : tests) {
    if (verbose) {
      fmt::print("RUN {}\n", test.name);
      std::fflush(stdout);
    }
    const auto start = std::chrono::steady_clock::now();
    const Result r = no_isolate ? run_test(test, config) : run_isolated(test, config, timeout_s);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    switch (r.status) {
      case Status::kPassed:
        ++passed;
        nodes_matched += r.coverage.matched;
        nodes_placed += r.coverage.placed;
        passed_variant += r.ran_variant;
        if (fallback || r.coverage.placed > 0) {
          ++on_backend;
          passed_on_backend.insert(test.name);
        }
        if (verbose)
          fmt::print("PASSED {} ({:.2f} s; {} ran {} of the {} nodes its patterns match){}\n",
                     test.name, seconds, config.backend, r.coverage.placed, r.coverage.matched,
                     r.ran_variant ? " [variant]" : "");
        break;
      case Status::kFailed:
        ++num_failed;
        fmt::print("FAILED {}: {}\n", test.name, r.reason);
        break;
      case Status::kUnsupported:
        ++unsupported;
        if (verbose) fmt::print("UNSUPPORTED {}: {}\n", test.name, r.reason);
        break;
    }
    outcome[test.name] = r.status == Status::kPassed
                             ? fmt::format("passed, but {} ran none of its nodes", config.backend)
                             : status_name(r.status);
    report.push_back({{"name", test.name},
                      {"dir", test.dir.string()},
                      {"status", status_name(r.status)},
                      {"reason", r.reason},
                      {"nodes_matched", r.coverage.matched},
                      {"nodes_placed", r.coverage.placed},
                      {"seconds", seconds}});
  }

  // The ratchet: a listed test that no longer passes on the backend is a regression; a new
  // pass is news (printed so that a developer adds it), never a failure.
  int regressions = 0;
  if (!passing_path.empty()) {
    for (const std::string& name : listed) {
      if (!discovered.count(name)) {
        ++regressions;
        fmt::print("REGRESSED {}: listed in {} but not found in the suites\n", name, passing_path);
      } else if (outcome.count(name) && !passed_on_backend.count(name)) {
        ++regressions;
        fmt::print("REGRESSED {}: listed in {} but {}\n", name, passing_path, outcome[name]);
      }
    }
    int news = 0;
    for (const std::string& name : passed_on_backend)
      if (!listed.count(name)) {
        ++news;
        fmt::print("NEW {}: passes on {}; add it to {}\n", name, config.backend, passing_path);
      }
    fmt::print("conformance: {} of the {} listed tests regressed, {} new passes\n", regressions,
               listed.size(), news);
  }
  if (!write_passing_path.empty()) {
    try {
      write_list(write_passing_path, config.backend, passed_on_backend);
    } catch (const std::exception& e) {
      fmt::print(stderr, "collage_conformance: {}\n", e.what());
      return 1;
    }
  }

  if (!report_path.empty()) {
    std::ofstream out(report_path);
    // Reasons quote model-provided names, which need not be valid UTF-8.
    out << report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    if (!out) {
      fmt::print(stderr, "collage_conformance: cannot write report {}\n", report_path);
      summary();
      return 1;
    }
  }
  summary();
  if (passed < min_passed)
    fmt::print("conformance: {} passed is below --min-passed {}\n", passed, min_passed);
  if (on_backend < min_on_backend)
    fmt::print("conformance: {} passed on {} is below --min-on-backend {}\n", on_backend,
               config.backend, min_on_backend);
  if (passed_variant < min_variant)
    fmt::print("conformance: {} passed with the variant is below --min-variant-passed {}\n",
               passed_variant, min_variant);
  return num_failed == 0 && regressions == 0 && passed >= min_passed &&
                 on_backend >= min_on_backend && passed_variant >= min_variant
             ? 0
             : 1;
}

}  // namespace
}  // namespace collage::conformance

int main(int argc, char** argv) {
  return collage::conformance::main_impl(argc, argv);
}

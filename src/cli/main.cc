// `collage`: the command-line front end. Exit status: 0 success, 2 bad input (a model,
// file or argument the user handed us), 1 anything else (a bug or a backend failure).
#include <fmt/core.h>

#include <csignal>
#include <filesystem>

#include <CLI/CLI.hpp>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "cli/library_env.h"
#include "collage/backend.h"
#include "collage/error.h"
#include "collage/version.h"
#include "search/cost_db.h"
#include "search/isolated_measurer.h"

namespace {

// `collage --version`: collage's version, then each backend's library version (what a
// bug report needs, and what the cost DB keys measurements by).
std::string version_text() {
  std::string text = fmt::format("collage {}\nbackends:", collage::version());
  for (collage::Backend* b : collage::BackendRegistry::global().all())
    text += fmt::format("\n  {:<14} {} ({}{})", b->name(), b->version(),
                        collage::backend_kind_name(b->kind()),
                        b->available() ? "" : ", not available: " + b->unavailable_reason());
  text += fmt::format("\ncost databases: sqlite{}",
                      collage::CostDb::postgres_available()
                          ? ", postgresql"
                          : " (postgresql: not built, libpq was missing at configure time)");
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  collage::cli::set_library_environment(argc, argv);
  CLI::App app{"collage: runs ONNX models fastest by mixing backends"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_text, "print collage's and each backend's version");
  // Global options may follow the subcommand name too (`collage run --backend-plugin x.so m.onnx`).
  app.fallthrough();
  std::vector<std::string> plugins;
  app.add_option("--backend-plugin", plugins,
                 "load third-party backends from this shared library (repeatable)");
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
  std::map<std::string, collage::cli::Action> actions;
  actions["run"] = collage::cli::add_run_command(app);
  actions["info"] = collage::cli::add_info_command(app);
  actions["backends"] = collage::cli::add_backends_command(app);
  actions["tune"] = collage::cli::add_tune_command(app);
  actions["show"] = collage::cli::add_show_command(app);
  actions["bench"] = collage::cli::add_bench_command(app);
  actions["zoo"] = collage::cli::add_zoo_command(app);
  actions["costs"] = collage::cli::add_costs_command(app);
  // With --cost-db: measures a shared database's jobs. Without: the isolated worker `collage
  // tune` starts to measure candidates in (see measure_worker_command.cc).
  actions["measure-worker"] = collage::cli::add_measure_worker_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    // Diagnostics go to stderr: stdout carries results (`--json` output must be all of it).
    spdlog::set_default_logger(std::make_shared<spdlog::logger>(
        "", std::make_shared<spdlog::sinks::stderr_color_sink_mt>()));
    spdlog::set_level(spdlog::level::from_str(log_level));
    for (const std::string& plugin : plugins)
      collage::BackendRegistry::global().load_plugin(plugin);
    // The worker is this very binary; /proc/self/exe survives a relative argv[0] and cwd.
    std::error_code ec;
    std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    std::vector<std::string> absolute_plugins;
    for (const std::string& plugin : plugins)
      absolute_plugins.push_back(std::filesystem::absolute(plugin, ec).string());
    if (!self.empty()) collage::set_measure_worker_command({self, absolute_plugins});
    for (auto* sub : app.get_subcommands()) return actions.at(sub->get_name())();
  } catch (const collage::Error& e) {
    fmt::print(stderr, "collage: {}: {}\n", collage::error_kind_name(e.kind()), e.what());
    return e.is_bad_input() ? 2 : 1;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "collage: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "collage: internal error: {}\n", e.what());
    return 1;
  }
  return 0;
}

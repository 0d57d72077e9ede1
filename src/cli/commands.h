// Each `collage` subcommand registers its options on a CLI11 app and returns the action
// that runs it. The action returns the process exit status.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <map>
#include <string>

#include "collage/model.h"

namespace collage::cli {

using Action = std::function<int()>;

// Options every model-loading command shares: --dim name=value, --max-tensor-bytes.
struct ModelOptions {
  std::string path;
  std::vector<std::string> dims;
  int64_t max_tensor_bytes = int64_t{4} << 30;

  void add_to(CLI::App& app);
  LoadOptions load_options() const;  // throws Error(kInvalidArgument) on a bad --dim
};

Action add_run_command(CLI::App& app);
Action add_info_command(CLI::App& app);
Action add_backends_command(CLI::App& app);
Action add_tune_command(CLI::App& app);
Action add_show_command(CLI::App& app);
Action add_bench_command(CLI::App& app);
Action add_zoo_command(CLI::App& app);
Action add_measure_worker_command(CLI::App& app);
Action add_costs_command(CLI::App& app);

}  // namespace collage::cli

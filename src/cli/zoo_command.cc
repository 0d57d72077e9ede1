// collage zoo NAME -o FILE.onnx: writes a built-in model (random weights from a fixed
// seed, so the file is the same bytes everywhere); collage zoo --list: what there is.
#include <fmt/core.h>

#include "cli/commands.h"
#include "models/zoo.h"

namespace collage::cli {
namespace {

struct ZooOptions {
  std::string name;
  std::string output;
  bool list = false;
  uint64_t seed = models::kZooSeed;
};

// Builds every model to measure it: a few seconds and ~1 GB at peak (one model at a time).
int list_models() {
  fmt::print("{:<16} {:>12} {:>9}  {}\n", "model", "parameters", "GFLOPs", "description");
  for (const models::ZooModel& m : models::zoo_models()) {
    ModelStats stats = model_stats(m.build(models::kZooSeed));
    fmt::print("{:<16} {:>10.2f} M {:>9.3f}  {}\n", m.name, stats.parameters / 1e6, stats.gflops,
               m.description);
  }
  return 0;
}

int zoo(const ZooOptions& o) {
  if (o.list) return list_models();
  if (o.name.empty())
    fail(ErrorKind::kInvalidArgument,
         "name a model to write (collage zoo NAME -o FILE.onnx) or "
         "pass --list");
  Graph graph = models::build_zoo_model(o.name, o.seed);
  std::string path = o.output.empty() ? o.name + ".onnx" : o.output;
  save_model(graph, path);
  ModelStats stats = model_stats(graph);
  fmt::print("wrote {}: {} nodes, {:.2f} M parameters, {:.3f} GFLOPs\n", path, graph.num_nodes(),
             stats.parameters / 1e6, stats.gflops);
  return 0;
}

}  // namespace

Action add_zoo_command(CLI::App& app) {
  auto o = std::make_shared<ZooOptions>();
  CLI::App* cmd =
      app.add_subcommand("zoo", "write a built-in model (the paper's workloads) as ONNX");
  cmd->add_option("name", o->name, "model name (see --list)");
  cmd->add_option("-o,--output", o->output, "ONNX file to write (default: NAME.onnx)");
  cmd->add_flag("--list", o->list, "list the models with their parameters and GFLOPs");
  cmd->add_option("--seed", o->seed, "seed of the random weights")->capture_default_str();
  return [o] { return zoo(*o); };
}

}  // namespace collage::cli

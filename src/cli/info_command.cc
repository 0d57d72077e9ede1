// collage info MODEL.onnx: inputs/outputs, op histogram, parameters, GFLOPs.
#include <fmt/core.h>

#include <algorithm>

#include "cli/commands.h"

namespace collage::cli {
namespace {

void print_values(const char* title, const Graph& graph, const std::vector<ValueId>& ids) {
  fmt::print("{}:\n", title);
  for (ValueId id : ids) {
    const Value& v = graph.value(id);
    fmt::print("  {:<24} {} {}\n", v.name, dtype_name(v.dtype), shape_to_string(v.shape));
  }
}

int info(const ModelOptions& o) {
  Graph graph = load_model(o.path, o.load_options());
  ModelStats stats = model_stats(graph);
  fmt::print("model: {}\nopset: {}\nnodes: {} (after constant folding)\n", o.path, graph.opset,
             graph.num_nodes());
  print_values("inputs", graph, graph.inputs);
  print_values("outputs", graph, graph.outputs);
  std::vector<std::pair<std::string, int>> ops(stats.op_histogram.begin(),
                                               stats.op_histogram.end());
  std::stable_sort(ops.begin(), ops.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  fmt::print("ops:\n");
  for (const auto& [op, count] : ops) fmt::print("  {:<24} {}\n", op, count);
  fmt::print("parameters: {} ({:.2f} M)\n", stats.parameters, stats.parameters / 1e6);
  fmt::print("GFLOPs: {:.3f}\n", stats.gflops);
  return 0;
}

}  // namespace

Action add_info_command(CLI::App& app) {
  auto o = std::make_shared<ModelOptions>();
  CLI::App* cmd = app.add_subcommand("info", "print a model's inputs, outputs, ops and size");
  o->add_to(*cmd);
  return [o] { return info(*o); };
}

}  // namespace collage::cli

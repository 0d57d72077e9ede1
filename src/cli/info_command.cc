// collage info MODEL.onnx [--json]: inputs/outputs, op histogram, parameters, GFLOPs.
#include <fmt/core.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "collage/version.h"

namespace collage::cli {
namespace {

struct InfoOptions {
  ModelOptions model;
  bool json = false;
};

void print_values(const char* title, const Graph& graph, const std::vector<ValueId>& ids) {
  fmt::print("{}:\n", title);
  for (ValueId id : ids) {
    const Value& v = graph.value(id);
    fmt::print("  {:<24} {} {}\n", v.name, dtype_name(v.dtype), shape_to_string(v.shape));
  }
}

nlohmann::json values_json(const Graph& graph, const std::vector<ValueId>& ids) {
  nlohmann::json out = nlohmann::json::array();
  for (ValueId id : ids) {
    const Value& v = graph.value(id);
    out.push_back({{"name", v.name}, {"dtype", dtype_name(v.dtype)}, {"shape", v.shape}});
  }
  return out;
}

int info(const InfoOptions& o) {
  Graph graph = load_model(o.model.path, o.model.load_options());
  ModelStats stats = model_stats(graph);
  std::vector<std::pair<std::string, int>> ops(stats.op_histogram.begin(),
                                               stats.op_histogram.end());
  std::stable_sort(ops.begin(), ops.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  if (o.json) {
    // The `info --json` object (docs/DESIGN.md, "CLI output for scripts").
    nlohmann::json op_counts = nlohmann::json::object();
    for (const auto& [op, count] : ops) op_counts[op] = count;
    nlohmann::json out = {{"format", "collage-info"},
                          {"version", 1},
                          {"collage_version", version()},
                          {"model", o.model.path},
                          {"opset", graph.opset},
                          {"nodes", graph.num_nodes()},
                          {"inputs", values_json(graph, graph.inputs)},
                          {"outputs", values_json(graph, graph.outputs)},
                          {"ops", op_counts},
                          {"parameters", stats.parameters},
                          {"gflops", stats.gflops}};
    fmt::print("{}\n", out.dump(2));
    return 0;
  }
  fmt::print("model: {}\nopset: {}\nnodes: {} (after constant folding)\n", o.model.path,
             graph.opset, graph.num_nodes());
  print_values("inputs", graph, graph.inputs);
  print_values("outputs", graph, graph.outputs);
  fmt::print("ops:\n");
  for (const auto& [op, count] : ops) fmt::print("  {:<24} {}\n", op, count);
  fmt::print("parameters: {} ({:.2f} M)\n", stats.parameters, stats.parameters / 1e6);
  fmt::print("GFLOPs: {:.3f}\n", stats.gflops);
  return 0;
}

}  // namespace

Action add_info_command(CLI::App& app) {
  auto o = std::make_shared<InfoOptions>();
  CLI::App* cmd = app.add_subcommand("info", "print a model's inputs, outputs, ops and size");
  o->model.add_to(*cmd);
  cmd->add_flag("--json", o->json, "print one JSON object on stdout instead of text");
  return [o] { return info(*o); };
}

}  // namespace collage::cli

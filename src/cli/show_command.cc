// collage show MODEL.onnx --plan PLAN.json [--dot FILE] [--svg FILE]: the placement as text
// and as a Graphviz picture coloured by backend (like the paper's placement figure).
#include <fmt/core.h>

#include <cstdlib>
#include <fstream>
#include <map>

#include "cli/commands.h"
#include "collage/plan.h"
#include "collage/session.h"

namespace collage::cli {
namespace {

struct ShowOptions {
  ModelOptions model;
  std::string plan_path, dot_path, svg_path;
};

const char* color_for(const std::string& backend) {
  static const std::map<std::string, const char*> known = {
      {"reference", "#d9d9d9"}, {"onednn", "#8dd3c7"},        {"blas", "#fdb462"},
      {"xnnpack", "#bebada"},   {"xnnpack-graph", "#80b1d3"}, {"halide", "#fb8072"},
      {"torch", "#b3de69"},     {"torch-script", "#ccebc5"}};
  auto it = known.find(backend);
  return it != known.end() ? it->second : "#ffffb3";
}

std::string dot_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

std::string to_dot(const Graph& g, const Plan& plan) {
  std::map<std::string, size_t> group_of;
  for (size_t i = 0; i < plan.groups.size(); ++i)
    for (const auto& n : plan.groups[i].nodes) group_of[n] = i;
  std::string dot = "digraph placement {\n  rankdir=TB;\n  node [shape=box, style=filled];\n";
  for (size_t i = 0; i < plan.groups.size(); ++i) {
    const PlanGroup& pg = plan.groups[i];
    bool cluster = pg.nodes.size() > 1;
    if (cluster)
      dot += fmt::format("  subgraph cluster_{} {{ label=\"{} {:.3f} ms\"; style=rounded;\n", i,
                         pg.backend, pg.cost_ms);
    for (const auto& name : pg.nodes) {
      auto id = g.find_node(name);
      std::string op = id ? g.node(*id).op_type : "?";
      dot += fmt::format("    \"{}\" [label=\"{}\\n{}\", fillcolor=\"{}\"];\n", dot_escape(name),
                         op, dot_escape(name), color_for(pg.backend));
    }
    if (cluster) dot += "  }\n";
  }
  for (const Node& n : g.nodes())
    for (ValueId v : n.inputs) {
      if (v == kNoValue || g.value(v).producer < 0) continue;
      dot += fmt::format("  \"{}\" -> \"{}\";\n", dot_escape(g.node(g.value(v).producer).name),
                         dot_escape(n.name));
    }
  // A legend: one box per backend used.
  dot += "  subgraph cluster_legend { label=\"backends\";\n";
  std::map<std::string, bool> used;
  for (const auto& pg : plan.groups) used[pg.backend] = true;
  for (const auto& [b, _] : used)
    dot += fmt::format("    \"legend_{}\" [label=\"{}\", fillcolor=\"{}\"];\n", b, b, color_for(b));
  dot += "  }\n}\n";
  return dot;
}

int show(const ShowOptions& o) {
  Graph graph = load_model(o.model.path, o.model.load_options());
  Plan plan = Plan::load(o.plan_path);
  // Validates the plan against the model exactly as `run --plan` would.
  Session session(graph, plan, SessionOptions{});
  fmt::print("plan {} ({}), predicted {:.3f} ms, measured {:.3f} ms, tuned on {}\n", o.plan_path,
             plan.optimizer, plan.predicted_ms, plan.measured_ms, plan.hardware);
  for (size_t i = 0; i < plan.groups.size(); ++i) {
    const PlanGroup& pg = plan.groups[i];
    std::string ops;
    for (const auto& name : pg.nodes) {
      auto id = graph.find_node(name);
      ops += (ops.empty() ? "" : " ") + (id ? graph.node(*id).op_type : "?");
    }
    fmt::print("  [{:>3}] {:<14} {:>9.3f} ms  {}  ({}{})\n", i, pg.backend, pg.cost_ms, ops,
               pg.nodes.front(), pg.nodes.size() > 1 ? " ..." : "");
  }
  std::string dot = to_dot(graph, plan);
  if (!o.dot_path.empty()) {
    std::ofstream(o.dot_path) << dot;
    fmt::print("graphviz written to {}\n", o.dot_path);
  }
  if (!o.svg_path.empty()) {
    std::string tmp = o.svg_path + ".dot";
    std::ofstream(tmp) << dot;
    std::string cmd = fmt::format("dot -Tsvg '{}' -o '{}'", tmp, o.svg_path);
    if (std::system(cmd.c_str()) != 0)
      fail(ErrorKind::kIo, "could not run graphviz's `dot` (apt install graphviz)");
    std::remove(tmp.c_str());
    fmt::print("svg written to {}\n", o.svg_path);
  }
  return 0;
}

}  // namespace

Action add_show_command(CLI::App& app) {
  auto o = std::make_shared<ShowOptions>();
  CLI::App* cmd = app.add_subcommand("show", "print a plan's placement; draw it with graphviz");
  o->model.add_to(*cmd);
  cmd->add_option("--plan", o->plan_path, "plan from `collage tune`")->required();
  cmd->add_option("--dot", o->dot_path, "write the placement as a Graphviz file");
  cmd->add_option("--svg", o->svg_path, "render the placement to SVG (needs graphviz)");
  return [o] { return show(*o); };
}

}  // namespace collage::cli

// collage show MODEL.onnx --plan PLAN.json [--dot FILE] [--svg FILE]: the placement as text
// and as a Graphviz picture coloured by backend (like the paper's placement figure).
#include <fmt/core.h>

#include <fstream>

#include "cli/commands.h"
#include "collage/placement_view.h"
#include "collage/plan.h"
#include "collage/session.h"

namespace collage::cli {
namespace {

struct ShowOptions {
  ModelOptions model;
  std::string plan_path, dot_path, svg_path;
};

int show(const ShowOptions& o) {
  Graph graph = load_model(o.model.path, o.model.load_options());
  Plan plan = Plan::load(o.plan_path);
  // Validates the plan against the model exactly as `run --plan` would.
  Session session(graph, plan, SessionOptions{});
  fmt::print("plan {} ({}), predicted {:.3f} ms, measured {:.3f} ms, tuned on {}\n", o.plan_path,
             plan.optimizer, plan.predicted_ms, plan.measured_ms, plan.hardware);
  fmt::print("{}", placement_table(graph, plan));
  std::string dot = placement_to_dot(graph, plan);
  if (!o.dot_path.empty()) {
    std::ofstream out(o.dot_path);
    out << dot;
    if (!out) fail(ErrorKind::kIo, "cannot write {}", o.dot_path);
    fmt::print("graphviz written to {}\n", o.dot_path);
  }
  if (!o.svg_path.empty()) {
    render_graphviz(dot, o.svg_path, "svg");
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

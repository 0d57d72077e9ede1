// Presenting a placement to a person: one colour per backend, the plan's groups as text,
// and the placement as a Graphviz picture (like the Collage paper's placement figure).
// Shared by `collage show` and the Python module's Plan.show().
#pragma once

#include <string>

#include "collage/graph.h"
#include "collage/plan.h"

namespace collage {

class BackendRegistry;

// Fill colour ("#rrggbb") of `backend`. The fallback (reference) is grey; every other registered
// backend takes the next entry of a fixed palette by its position in BackendRegistry::global()
// (reference first, built-ins by name, plugins in load order), extended with generated hues
// past the palette's end, so distinct registered backends always get distinct colours.
// A name that is not registered gets white.
std::string backend_color(const std::string& backend);
// The same over another registry.
std::string backend_color(const std::string& backend, const BackendRegistry& registry);

// One line per group of `plan`: index, backend (and variant), cost, the stage, lane and
// threads of groups in concurrent stages, op types and first node name.
std::string placement_table(const Graph& graph, const Plan& plan);

// The placement as Graphviz DOT: a box per node filled with its backend's colour, a cluster
// per multi-node group, a dashed cluster around each concurrent stage (its groups labelled
// with their lane and threads), the dataflow edges and a legend of the backends used. Node and
// backend names are escaped, so any name (quotes, backslashes, <>, newlines) is shown as is.
std::string placement_to_dot(const Graph& graph, const Plan& plan);

// Renders DOT text with graphviz's `dot` (found on PATH) to `output_path` in `format`
// ("svg", "png", "pdf"...). `dot` is started with an argument vector, never through a
// shell, so the path may hold any character. Throws Error(kIo) when `dot` is missing or
// fails (its own message goes to stderr).
void render_graphviz(const std::string& dot_text, const std::string& output_path,
                     const std::string& format = "svg");

}  // namespace collage

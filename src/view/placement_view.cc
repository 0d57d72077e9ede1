#include "collage/placement_view.h"

#include <fmt/core.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "collage/backend.h"

extern char** environ;

namespace collage {
namespace {

namespace fs = std::filesystem;

// ColorBrewer Set3 (light fills that keep black labels readable), its grey kept for
// reference, the fallback that runs whatever no other backend takes.
constexpr const char* kReferenceColor = "#d9d9d9";
constexpr const char* kPalette[] = {"#8dd3c7", "#fdb462", "#bebada", "#fb8072",
                                    "#80b1d3", "#b3de69", "#fccde5", "#ffffb3",
                                    "#bc80bd", "#ccebc5", "#ffed6f"};
constexpr size_t kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);

std::string hsl_to_hex(double h, double s, double l) {
  auto channel = [&](double n) {
    double k = std::fmod(n + h / 30.0, 12.0);
    double a = s * std::min(l, 1 - l);
    double v = l - a * std::max(-1.0, std::min({k - 3, 9 - k, 1.0}));
    return static_cast<int>(std::lround(v * 255));
  };
  return fmt::format("#{:02x}{:02x}{:02x}", channel(0), channel(8), channel(4));
}

// Past the palette: hues a golden angle apart (never repeating), light enough for labels;
// a hex string already taken is skipped, which keeps colours distinct after rounding.
std::map<std::string, std::string> registry_colors(const BackendRegistry& registry) {
  std::map<std::string, std::string> colors;
  std::set<std::string> taken = {kReferenceColor};
  size_t next = 0, generated = 0;
  for (Backend* b : registry.all()) {
    if (registry.is_fallback(*b)) {
      colors[b->name()] = kReferenceColor;
      continue;
    }
    std::string c;
    do {
      c = next < kPaletteSize ? kPalette[next++]
                              : hsl_to_hex(std::fmod(generated++ * 137.508, 360.0), 0.6, 0.78);
    } while (taken.count(c));
    taken.insert(c);
    colors[b->name()] = c;
  }
  return colors;
}

// Inside a DOT double-quoted string only '"' and '\' are special to the parser, but
// graphviz then reads backslash sequences in labels (\n, \l, \N...): doubling the
// backslash shows it literally. Newlines become graphviz's \n line break. '<' and '>' need
// nothing inside quotes (only an unquoted <...> is an HTML label); the SVG writer escapes them.
std::string dot_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += {'\\', c};
    else if (c == '\n')
      out += "\\n";
    else if (c != '\r')
      out += c;
  }
  return out;
}

std::string op_of(const Graph& g, const std::string& node) {
  auto id = g.find_node(node);
  return id ? g.node(*id).op_type : "?";
}

// "onednn" or "onednn/winograd": the backend and the variant it built.
std::string group_label(const PlanGroup& pg) {
  return pg.variant.empty() ? pg.backend : pg.backend + "/" + variant_summary(pg.variant);
}

// Stages of the plan with more than one lane.
std::set<int> concurrent_stages(const Plan& plan) {
  std::set<int> stages;
  for (const PlanGroup& pg : plan.groups)
    if (pg.lane > 0) stages.insert(pg.stage);
  return stages;
}

// A private file for the DOT text (mkstemp: no name of ours can collide or be predicted).
std::string write_temp_dot(const std::string& text) {
  std::error_code ec;
  fs::path dir = fs::temp_directory_path(ec);
  if (ec) dir = "/tmp";
  std::string pattern = (dir / "collage-placement-XXXXXX.dot").string();
  int fd = mkstemps(pattern.data(), 4);
  if (fd < 0)
    fail(ErrorKind::kIo, "cannot create a temporary file in {}: {}", dir.string(),
         std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd);
      std::remove(pattern.c_str());
      fail(ErrorKind::kIo, "cannot write {}: {}", pattern, std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  close(fd);
  return pattern;
}

}  // namespace

std::string backend_color(const std::string& backend) {
  return backend_color(backend, BackendRegistry::global());
}

std::string backend_color(const std::string& backend, const BackendRegistry& registry) {
  std::map<std::string, std::string> colors = registry_colors(registry);
  auto it = colors.find(backend);
  return it == colors.end() ? "#ffffff" : it->second;
}

std::string placement_table(const Graph& graph, const Plan& plan) {
  const std::set<int> concurrent = concurrent_stages(plan);
  std::string out;
  if (!concurrent.empty())
    out += fmt::format(
        "  ({} stages run their lanes at the same time; 'stage S.L xT': stage S, lane L, T "
        "threads)\n",
        concurrent.size());
  for (size_t i = 0; i < plan.groups.size(); ++i) {
    const PlanGroup& pg = plan.groups[i];
    std::string ops;
    for (const auto& name : pg.nodes) {
      if (!ops.empty()) ops += ' ';
      ops += op_of(graph, name);
    }
    std::string first = pg.nodes.empty() ? std::string("-") : pg.nodes.front();
    std::string where = concurrent.count(pg.stage)
                            ? fmt::format("  stage {}.{} x{}", pg.stage, pg.lane, pg.threads)
                            : std::string();
    out += fmt::format("  [{:>3}] {:<14} {:>9.3f} ms{}  {}  ({}{})\n", i, group_label(pg),
                       pg.cost_ms, where, ops, first, pg.nodes.size() > 1 ? " ..." : "");
  }
  return out;
}

std::string placement_to_dot(const Graph& g, const Plan& plan) {
  std::map<std::string, std::string> colors = registry_colors(BackendRegistry::global());
  auto color = [&](const std::string& b) {
    auto it = colors.find(b);
    return it == colors.end() ? std::string("#ffffff") : it->second;
  };
  // Node ids are "n<graph node id>": names only ever appear escaped, inside labels.
  std::string dot =
      "digraph placement {\n  rankdir=TB;\n  node [shape=box, style=filled, "
      "fontname=\"Helvetica\"];\n";
  // A concurrent stage is a dashed cluster around its groups, each labelled with its lane.
  const std::set<int> concurrent = concurrent_stages(plan);
  int open_stage = -1;
  for (size_t i = 0; i < plan.groups.size(); ++i) {
    const PlanGroup& pg = plan.groups[i];
    if (open_stage >= 0 && pg.stage != open_stage) {
      dot += "  }\n";
      open_stage = -1;
    }
    if (open_stage < 0 && concurrent.count(pg.stage)) {
      open_stage = pg.stage;
      dot += fmt::format(
          "  subgraph cluster_stage_{} {{ label=\"stage {}: lanes at the same time\"; "
          "style=dashed;\n",
          pg.stage, pg.stage);
    }
    const bool in_stage = open_stage >= 0;
    bool cluster = pg.nodes.size() > 1 || in_stage;
    if (cluster)
      dot += fmt::format("  subgraph cluster_{} {{ label=\"{} {:.3f} ms{}\"; style=rounded;\n", i,
                         dot_escape(group_label(pg)), pg.cost_ms,
                         in_stage ? fmt::format(" lane {} x{}", pg.lane, pg.threads) : "");
    for (const auto& name : pg.nodes) {
      auto id = g.find_node(name);
      if (!id) continue;
      dot += fmt::format("    n{} [label=\"{}\\n{}\", fillcolor=\"{}\"];\n", *id,
                         dot_escape(g.node(*id).op_type), dot_escape(name), color(pg.backend));
    }
    if (cluster) dot += "  }\n";
  }
  if (open_stage >= 0) dot += "  }\n";
  for (NodeId n = 0; n < static_cast<NodeId>(g.num_nodes()); ++n)
    for (ValueId v : g.node(n).inputs) {
      if (v == kNoValue || g.value(v).producer < 0) continue;
      dot += fmt::format("  n{} -> n{};\n", g.value(v).producer, n);
    }
  // A legend: one box per backend used.
  std::set<std::string> used;
  for (const auto& pg : plan.groups) used.insert(pg.backend);
  dot += "  subgraph cluster_legend { label=\"backends\";\n";
  size_t k = 0;
  for (const std::string& b : used)
    dot += fmt::format("    legend_{} [label=\"{}\", fillcolor=\"{}\"];\n", k++, dot_escape(b),
                       color(b));
  dot += "  }\n}\n";
  return dot;
}

void render_graphviz(const std::string& dot_text, const std::string& output_path,
                     const std::string& format) {
  std::string input = write_temp_dot(dot_text);
  // "-o<path>" in one argument: a path starting with '-' is still the output file.
  std::vector<std::string> args = {"dot", "-T" + format, "-o" + output_path, input};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, "dot", nullptr, nullptr, argv.data(), environ);
  if (rc != 0) {
    std::remove(input.c_str());
    fail(ErrorKind::kIo, "could not run graphviz's `dot` ({}; apt install graphviz)",
         std::strerror(rc));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::remove(input.c_str());
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail(ErrorKind::kIo, "graphviz's `dot` failed writing {} ({})", output_path,
         WIFEXITED(status) ? fmt::format("exit status {}", WEXITSTATUS(status))
                           : fmt::format("signal {}", WTERMSIG(status)));
}

}  // namespace collage

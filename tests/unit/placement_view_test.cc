// Presenting placements: one distinct colour per registered backend (however many there
// are), and DOT that graphviz parses whatever the node and backend names hold.
#include "collage/placement_view.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "collage/backend.h"
#include "graph_builder.h"

namespace collage {
namespace {

namespace fs = std::filesystem;

// A backend that only has a name: colours depend on nothing else.
class NamedBackend : public Backend {
 public:
  explicit NamedBackend(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  std::string version() const override { return "0"; }
  std::vector<PatternEntry> patterns() const override { return {}; }
  std::unique_ptr<Kernel> compile(const Graph&, const CompileOptions&) override {
    fail(ErrorKind::kUnsupported, "no kernels");
  }

 private:
  std::string name_;
};

TEST(PlacementView, EveryRegisteredBackendHasItsOwnColour) {
  std::set<std::string> colours;
  std::vector<Backend*> all = BackendRegistry::global().all();
  ASSERT_GE(all.size(), 2u);
  for (Backend* b : all) {
    std::string c = backend_color(b->name());
    EXPECT_TRUE(std::regex_match(c, std::regex("#[0-9a-f]{6}"))) << c;
    EXPECT_TRUE(colours.insert(c).second) << b->name() << " shares " << c;
  }
  EXPECT_EQ(backend_color("reference"), "#d9d9d9");
  EXPECT_EQ(backend_color("not-registered"), "#ffffff");
}

TEST(PlacementView, ColoursStayDistinctPastThePalette) {
  BackendRegistry registry;
  registry.add(std::make_shared<NamedBackend>("reference"));
  for (int i = 0; i < 60; ++i) registry.add(std::make_shared<NamedBackend>(fmt::format("b{}", i)));
  std::set<std::string> colours;
  for (Backend* b : registry.all())
    EXPECT_TRUE(colours.insert(backend_color(b->name(), registry)).second) << b->name();
  EXPECT_EQ(colours.size(), 61u);
  EXPECT_EQ(colours.count("#ffffff"), 0u);
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(PlacementView, DotEscapesNamesAndGraphvizRendersThem) {
  testing::GraphBuilder b(13);
  ValueId x = b.input("x", DType::kFloat32, {2, 3});
  ValueId r = b.add1("Relu", {x});
  b.output(b.add1("Neg", {r}));
  Graph g = b.finish();
  // Names a DOT writer must escape: quotes, backslashes (also graphviz's \N, \G escapes),
  // a newline, and what would open an HTML label if it were not quoted.
  const std::string evil = "say \"hi\" \\N <b>bold</b>\nsecond line";
  g.node(0).name = evil;
  g.node(1).name = "plain";
  Plan plan;
  PlanGroup first, second;
  first.nodes = {evil};
  first.backend = "reference";
  first.cost_ms = 0.5;
  second.nodes = {"plain"};
  second.backend = "onednn";
  second.cost_ms = 0.25;
  plan.groups = {first, second};
  std::string dot = placement_to_dot(g, plan);
  EXPECT_NE(dot.find(R"(say \"hi\" \\N <b>bold</b>\nsecond line)"), std::string::npos) << dot;
  EXPECT_NE(dot.find("fillcolor=\"" + backend_color("onednn") + "\""), std::string::npos);

  fs::path dir = fs::temp_directory_path() / ("collage_view_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::path svg = dir / "it's \"a\" $(name).svg";
  render_graphviz(dot, svg.string(), "svg");
  std::string text = read_file(svg);
  // Shown as text (escaped by the SVG writer), not interpreted as markup or escapes.
  EXPECT_NE(text.find("say &quot;hi&quot; \\N &lt;b&gt;bold&lt;/b&gt;"), std::string::npos) << text;
  EXPECT_NE(text.find("second line"), std::string::npos);
  fs::remove_all(dir);
}

TEST(PlacementView, GraphvizFailureIsAnIoError) {
  try {
    render_graphviz("digraph {", "/nonexistent-dir/x.svg", "svg");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/x.svg"), std::string::npos);
  }
}

}  // namespace
}  // namespace collage

// Loads the example plugin the way `collage --backend-plugin` does and checks it.
#include <gtest/gtest.h>

#include <set>

#include "backend_test_util.h"
#include "collage/backend.h"
#include "collage/placement_view.h"
#include "collage/session.h"
#include "graph_builder.h"

namespace collage {
namespace {

Backend& load_example() {
  static bool loaded = false;
  if (!loaded) {
    BackendRegistry::global().load_plugin(COLLAGE_EXAMPLE_PLUGIN_PATH);
    loaded = true;
  }
  return BackendRegistry::global().get("example-clamp");
}

TEST(ExamplePlugin, RegistersThroughTheCFunction) {
  Backend& b = load_example();
  EXPECT_EQ(b.version(), "1.0");
  EXPECT_FALSE(b.patterns().empty());
}

// `collage show` colours come from the registry: a plugin's backend gets its own too.
TEST(ExamplePlugin, HasItsOwnPlacementColour) {
  load_example();
  std::set<std::string> others;
  for (Backend* b : BackendRegistry::global().all())
    if (b->name() != "example-clamp") others.insert(backend_color(b->name()));
  EXPECT_EQ(others.count(backend_color("example-clamp")), 0u) << backend_color("example-clamp");
  EXPECT_NE(backend_color("example-clamp"), "#ffffff");
}

TEST(ExamplePlugin, FusesClampChainAndMatchesReference) {
  Backend& b = load_example();
  testing::GraphBuilder gb(13);
  ValueId x = gb.input("x", DType::kFloat32, {2, 50});
  ValueId r = gb.add1("Relu", {x});
  ValueId lo = gb.constant("lo", Tensor::scalar<float>(0.25f));
  ValueId hi = gb.constant("hi", Tensor::scalar<float>(0.5f));
  ValueId c = gb.add1("Clip", {r, lo, hi});
  gb.output(gb.add1("Neg", {c}));
  Graph g = gb.finish();

  std::vector<Match> matches = find_matches(g, b);
  bool chain_found = false;
  for (const Match& m : matches) chain_found |= m.nodes == std::vector<NodeId>{0, 1};
  EXPECT_TRUE(chain_found) << "Relu->Clip was not proposed as one group";

  SessionOptions options;
  options.backend = "example-clamp";
  Session on_plugin(g, options);
  std::vector<std::string> placement = on_plugin.node_backends();
  EXPECT_EQ(placement, (std::vector<std::string>{"example-clamp", "example-clamp", "reference"}));
  Session reference(g, SessionOptions{});
  auto inputs = random_inputs(g, 5);
  EXPECT_TRUE(testing::outputs_match(on_plugin.run(inputs), reference.run(inputs)));
}

TEST(ExamplePlugin, MissingLibraryIsAnIoError) {
  try {
    BackendRegistry::global().load_plugin("/nonexistent/libnothing.so");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
  }
}

}  // namespace
}  // namespace collage

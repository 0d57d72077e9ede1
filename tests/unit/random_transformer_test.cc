// Differential test over transformers of random sizes (the zoo's BERT, GPT-2 and ViT
// builders, models/families.h: odd sequence lengths down to one token, one head or
// several, widths off the 16-blocks, LayerNorm decomposed or as one node): every host
// backend, and plans mixing them at random with concurrent stages (random_plan.h), compute
// what reference computes. The attention, LayerNorm, GELU and glue kernels (issue 16) meet
// shapes the zoo's fixed sizes never give them.
//
// COLLAGE_RANDOM_GRAPHS=N runs N of each family instead of the default few.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "collage/backend.h"
#include "collage/session.h"
#include "models/families.h"
#include "random_plan.h"

namespace collage {
namespace {

struct Family {
  const char* name;
  Graph (*build)(const models::TransformerSize&, uint64_t);
};
const Family kFamilies[] = {
    {"bert", models::bert_sized}, {"gpt2", models::gpt2_sized}, {"vit", models::vit_sized}};

models::TransformerSize random_size(std::mt19937& rng, bool vit) {
  auto pick = [&](std::vector<int64_t> options) {
    return options[std::uniform_int_distribution<size_t>(0, options.size() - 1)(rng)];
  };
  models::TransformerSize s;
  s.layers = static_cast<int>(pick({1, 2}));
  s.heads = pick({1, 2, 3, 4});
  s.hidden = s.heads * pick({4, 8, 12, 16, 24});
  s.ffn = pick({s.hidden * 2, s.hidden * 4, 40});
  s.seq = vit ? pick({2, 5, 10, 17}) : pick({1, 2, 3, 5, 7, 16, 17, 31});
  s.vocab = pick({7, 50, 100});
  s.opset = pick({13, 17});
  return s;
}

// One random transformer: its graph, inputs (token ids anywhere in the vocabulary) and a
// description for failures.
struct Case {
  Graph graph;
  std::vector<Tensor> inputs;
  std::string what;
};

Case case_of(const Family& family, int seed) {
  std::mt19937 rng(static_cast<unsigned>(seed));
  const models::TransformerSize s = random_size(rng, family.build == models::vit_sized);
  Case c{family.build(s, seed), {}, ""};
  c.inputs = random_inputs(c.graph, seed);
  std::mt19937_64 ids(seed);
  for (Tensor& t : c.inputs)
    if (t.dtype() == DType::kInt64)
      for (int64_t& id : t.span<int64_t>())
        id = static_cast<int64_t>(ids() % static_cast<uint64_t>(s.vocab));
  c.what = std::string(family.name) + " seed " + std::to_string(seed) + " (" +
           std::to_string(s.layers) + " layers, hidden " + std::to_string(s.hidden) + ", " +
           std::to_string(s.heads) + " heads, ffn " + std::to_string(s.ffn) + ", seq " +
           std::to_string(s.seq) + ", opset " + std::to_string(s.opset) + ")";
  return c;
}

TEST(RandomTransformer, EveryHostBackendMatchesReference) {
  const std::vector<std::string> backends = testing::host_backends();
  for (const Family& family : kFamilies) {
    for (int seed = 0; seed < testing::random_graph_count(2); ++seed) {
      const Case c = case_of(family, seed);
      const std::vector<Tensor> want = Session(c.graph, SessionOptions{}).run(c.inputs);
      for (const std::string& backend : backends)
        for (int threads : {1, 2})
          testing::expect_session_like_reference(backend, c.graph, threads, c.inputs, want, c.what);
    }
  }
}

TEST(RandomTransformer, RandomlyMixedPlansMatchReference) {
  testing::MixedPlans mixed;
  for (const Family& family : kFamilies) {
    for (int seed = 100; seed < 100 + testing::random_graph_count(3); ++seed) {
      const Case c = case_of(family, seed);
      mixed.expect_like_reference(c.graph, c.inputs,
                                  Session(c.graph, SessionOptions{}).run(c.inputs), seed, c.what);
    }
  }
  EXPECT_GE(mixed.most_backends, 4u);
}

// Written as ONNX and loaded back (the import passes: identities, constant folding, dead
// code), each computes what it did before, on reference and on onednn.
TEST(RandomTransformer, ImportPassesKeepWhatTheGraphComputes) {
  for (const Family& family : kFamilies) {
    for (int seed = 200; seed < 200 + testing::random_graph_count(3); ++seed) {
      const Case c = case_of(family, seed);
      testing::expect_onnx_round_trip_like_reference(
          c.graph, "onednn", c.inputs, Session(c.graph, SessionOptions{}).run(c.inputs), c.what);
    }
  }
}

}  // namespace
}  // namespace collage

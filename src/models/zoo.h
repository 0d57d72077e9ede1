// The built-in model zoo: the Collage paper's workloads, GoogLeNet, Inception-v3, GPT-2 and
// ViT-B/16 (and small variants for tests), built in code so benchmarks and tests need no
// downloads.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collage/graph.h"

namespace collage::models {

// The seed `collage zoo` uses, so a model file is the same bytes on every machine.
constexpr uint64_t kZooSeed = 2022;

struct ZooModel {
  std::string name;
  std::string description;
  std::function<Graph(uint64_t seed)> build;
};

// Every model: the paper's full-size workloads, the other full-size ones, the tiny variants.
const std::vector<ZooModel>& zoo_models();
// Builds `name`; Error(kInvalidArgument) listing the known names when there is none.
Graph build_zoo_model(const std::string& name, uint64_t seed = kZooSeed);

}  // namespace collage::models

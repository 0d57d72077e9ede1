// Replays the inputs in fuzz_regressions/ (crashes the fuzzers found, once fixed, and a few
// hand-picked seeds) through the fuzz targets' entry points: each must load or be refused
// with a collage::Error, never crash, throw anything else, or break an invariant (kInternal).
// Files named model-* go to the model loader target, plan-* to the plan target.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "collage/error.h"
#include "fuzz_entry_points.h"

namespace collage::robustness {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> regression_inputs(const std::string& prefix) {
  std::vector<fs::path> paths;
  for (const auto& entry : fs::directory_iterator(FUZZ_REGRESSIONS_DIR))
    if (entry.path().filename().string().rfind(prefix, 0) == 0) paths.push_back(entry.path());
  std::sort(paths.begin(), paths.end());
  return paths;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

template <typename Target>
void replay(const std::string& prefix, Target target) {
  std::vector<fs::path> paths = regression_inputs(prefix);
  ASSERT_FALSE(paths.empty()) << "no " << prefix << "* files in " << FUZZ_REGRESSIONS_DIR;
  for (const fs::path& path : paths) {
    SCOPED_TRACE(path.filename().string());
    try {
      target(read_bytes(path));
    } catch (const Error& e) {
      EXPECT_NE(e.kind(), ErrorKind::kInternal) << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw a non-collage exception: " << e.what();
    }
  }
}

TEST(FuzzRegression, ModelInputsLoadOrFailCleanly) {
  replay("model-", fuzz::run_model_input);
}

TEST(FuzzRegression, PlanInputsLoadOrFailCleanly) {
  replay("plan-", fuzz::run_plan_input);
}

// Found by model_loader_fuzzer: a Reshape whose constant shape's dims multiply past 2^63
// overflowed (UBSan) while checking the element count; now refused as a limit.
TEST(FuzzRegression, ReshapeShapeOverflowIsALimit) {
  std::string bytes =
      read_bytes(fs::path(FUZZ_REGRESSIONS_DIR) / "model-reshape-shape-overflow.onnx");
  try {
    load_model_from_bytes(bytes, "", fuzz::fuzz_load_options());
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kLimit) << e.what();
    // Reshape's own check, not shape_numel's later one (reached only after the UB).
    EXPECT_NE(std::string(e.what()).find("(Reshape): shape"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace collage::robustness

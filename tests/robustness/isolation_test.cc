// `collage tune` with a plugin whose kernels segfault, abort, hang or throw: candidates are
// measured in a worker process, so tuning completes, the broken candidates cost +inf with
// the reason, and the plan uses none of them.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model_builder.h"

namespace collage::robustness {
namespace {

struct CliRun {
  int status = -1;
  std::string out;
};

CliRun run(const std::string& args, const TempDir& dir) {
  std::string out = dir.file("out.txt");
  std::string cmd = std::string(COLLAGE_CLI) + " --backend-plugin " + BROKEN_PLUGIN + " " + args +
                    " >" + out + " 2>&1";
  int raw = std::system(cmd.c_str());
  CliRun r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  std::ifstream in(out);
  std::stringstream s;
  s << in.rdbuf();
  r.out = s.str();
  return r;
}

std::string relu_chain(const TempDir& dir) {
  ModelBuilder b;
  b.input("x");
  b.node("Relu", {"x"}, {"a"}, "r1");
  b.node("Relu", {"a"}, {"y"}, "r2");
  b.output("y");
  return dir.write("m.onnx", b.bytes());
}

TEST(Isolation, TuningSurvivesCrashingKernels) {
  TempDir dir;
  std::string model = relu_chain(dir);
  std::string plan = dir.file("PLAN.json");
  CliRun r = run("tune " + model + " -o " + plan + " --cost-db " + dir.file("costs.db") +
                     " --backends reference,broken-segv,broken-abort,broken-hang,broken-throw"
                     " --budget 1 --isolate-timeout 2 -v",
                 dir);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("crashed: SIGSEGV"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("crashed: SIGABRT"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("timed out after 2 s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("broken-throw kernel refuses to run"), std::string::npos) << r.out;
  // The hang costs its timeout once (r2 has r1's shape: a cost-database hit), not forever:
  // the worker is lost to a timeout exactly once (r2's failure is reported from the DB).
  const std::string lost = "measure worker lost (timed out after";
  size_t timeouts = 0;
  for (size_t at = r.out.find(lost); at != std::string::npos; at = r.out.find(lost, at + 1))
    ++timeouts;
  EXPECT_EQ(timeouts, 1u) << r.out;

  std::ifstream in(plan);
  nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_FALSE(j["groups"].empty());
  for (const auto& g : j["groups"]) EXPECT_EQ(g["backend"], "reference") << j.dump();

  CliRun ran = run("run " + model + " --plan " + plan, dir);
  EXPECT_EQ(ran.status, 0) << ran.out;

  // The failures are in the cost database: a second run measures nothing and never hangs.
  CliRun again = run("tune " + model + " -o " + plan + " --cost-db " + dir.file("costs.db") +
                         " --backends reference,broken-segv,broken-abort,broken-hang,broken-throw"
                         " --budget 1 --isolate-timeout 2",
                     dir);
  EXPECT_EQ(again.status, 0) << again.out;
  EXPECT_NE(again.out.find("(0 measured"), std::string::npos) << again.out;
}

// The graph-level search merges the two Relu groups into one broken-region region, which
// crashes: it is measured alone in the worker before any plan containing it runs here.
TEST(Isolation, MergedGraphLevelRegionsAreMeasuredInTheWorker) {
  TempDir dir;
  std::string model = relu_chain(dir);
  std::string plan = dir.file("PLAN.json");
  CliRun r = run("tune " + model + " -o " + plan + " --cost-db " + dir.file("costs.db") +
                     " --backends reference,broken-region --budget 5 --isolate-timeout 10",
                 dir);
  ASSERT_EQ(r.status, 0) << r.out;
  std::ifstream in(plan);
  nlohmann::json j = nlohmann::json::parse(in);
  for (const auto& g : j["groups"]) EXPECT_LE(g["nodes"].size(), 1u) << j.dump();
  CliRun ran = run("run " + model + " --plan " + plan + " --verify", dir);
  EXPECT_EQ(ran.status, 0) << ran.out;
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir.file("costs.db").c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(
      sqlite3_prepare_v2(db, "SELECT reason FROM costs WHERE backend='broken-region' AND ok=0", -1,
                         &st, nullptr),
      SQLITE_OK);
  std::string reasons;
  while (sqlite3_step(st) == SQLITE_ROW)
    reasons += reinterpret_cast<const char*>(sqlite3_column_text(st, 0)) + std::string("\n");
  sqlite3_finalize(st);
  sqlite3_close(db);
  EXPECT_NE(reasons.find("crashed: SIGSEGV"), std::string::npos) << reasons;
}

// A model chaotic in float32 (util/compare.h): x [1, 1024] -> MatMul -> Mul(3e4) -> Sin ->
// MatMul. onednn-graph's products sum in another order than reference's, which its sines
// amplify past the tolerance; the check within the model's own sensitivity passes it in the
// worker, and the note comes back with the cost ("ok MS NOTE"): the tune says so, the plan
// uses onednn-graph, and `run --verify` passes saying why.
std::string chaotic_model(const TempDir& dir) {
  ModelBuilder b;
  b.input("x", kFloat, {1, 1024});
  uint64_t state = 12345;
  auto uniform = [&](float scale) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return scale * (2.0f * static_cast<float>((state >> 40) & 0xFFFFFF) / 16777216.0f - 1.0f);
  };
  auto weights = [&](const std::string& name, int64_t rows, int64_t cols, float scale) {
    onnx::TensorProto* t = b.initializer(name, kFloat, {rows, cols});
    for (int64_t i = 0; i < rows * cols; ++i) t->add_float_data(uniform(scale));
  };
  weights("w1", 1024, 64, 0.1f);
  weights("w2", 64, 16, 0.2f);
  b.initializer("gain", kFloat, {1})->add_float_data(3e4f);
  b.node("MatMul", {"x", "w1"}, {"a"}, "mm1");
  b.node("Mul", {"a", "gain"}, {"b"}, "gain");
  b.node("Sin", {"b"}, {"c"}, "sin");
  b.node("MatMul", {"c", "w2"}, {"y"}, "mm2");
  b.output("y", kFloat, {1, 16});
  return dir.write("chaotic.onnx", b.bytes());
}

TEST(Isolation, AChaoticModelsCheckNoteComesBackFromTheWorker) {
  TempDir dir;
  const std::string model = chaotic_model(dir), plan = dir.file("PLAN.json");
  CliRun r = run("tune " + model + " -o " + plan + " --cost-db " + dir.file("costs.db") +
                     " --backends reference,onednn-graph --budget 5",
                 dir);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("matched reference only within their own sensitivity"), std::string::npos)
      << r.out;
  std::ifstream in(plan);
  const nlohmann::json j = nlohmann::json::parse(in);
  bool onednn_graph = false;
  for (const auto& g : j["groups"]) onednn_graph |= g["backend"] == "onednn-graph";
  EXPECT_TRUE(onednn_graph) << j.dump();
  CliRun ran = run("run " + model + " --plan " + plan + " --verify", dir);
  EXPECT_EQ(ran.status, 0) << ran.out;
  EXPECT_NE(ran.out.find("within the model's own sensitivity"), std::string::npos) << ran.out;
}

TEST(Isolation, NoIsolateStillCatchesExceptions) {
  TempDir dir;
  std::string model = relu_chain(dir);
  CliRun r =
      run("tune " + model + " -o " + dir.file("PLAN.json") + " --cost-db " + dir.file("costs.db") +
              " --backends reference,broken-throw --budget 1 "
              "--no-isolate -v",
          dir);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("broken-throw kernel refuses to run"), std::string::npos) << r.out;
}

TEST(Isolation, NoIsolateCrashesOnSegfault) {
  // The control experiment: without the worker the segfault takes the tuner down, which is
  // what the isolation above prevents.
  TempDir dir;
  std::string model = relu_chain(dir);
  CliRun r =
      run("tune " + model + " -o " + dir.file("PLAN.json") + " --cost-db " + dir.file("costs.db") +
              " --backends reference,broken-segv --budget 1 "
              "--no-isolate",
          dir);
  EXPECT_EQ(r.status, 128 + SIGSEGV) << r.out;
}

}  // namespace
}  // namespace collage::robustness

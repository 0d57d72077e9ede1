// The CLI on bad files: exit status 2, exactly one line on stderr naming the problem, no
// crash (a signal would show as a status >= 128 from the shell).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <sstream>

#include "model_builder.h"

namespace collage::robustness {
namespace {

struct CliResult {
  int status = -1;
  std::string stderr_text;
};

CliResult run_cli(const std::string& args) {
  TempDir dir;
  std::string err = dir.file("stderr.txt");
  std::string cmd = std::string(COLLAGE_CLI) + " " + args + " >/dev/null 2>" + err;
  int raw = std::system(cmd.c_str());
  CliResult r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  std::ifstream in(err);
  std::stringstream s;
  s << in.rdbuf();
  r.stderr_text = s.str();
  return r;
}

void expect_bad_input(const std::string& args, const std::string& needle) {
  CliResult r = run_cli(args);
  EXPECT_EQ(r.status, 2) << args << "\n" << r.stderr_text;
  // One line: the message and its trailing newline.
  EXPECT_EQ(std::count(r.stderr_text.begin(), r.stderr_text.end(), '\n'), 1) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find(needle), std::string::npos) << r.stderr_text;
}

TEST(Cli, TruncatedModel) {
  TempDir dir;
  std::string bytes = ModelBuilder::relu().bytes();
  std::string path = dir.write("m.onnx", bytes.substr(0, bytes.size() / 2));
  expect_bad_input("info " + path, "parse");
}

TEST(Cli, MissingModel) {
  expect_bad_input("run /nonexistent/m.onnx", "/nonexistent/m.onnx");
}

TEST(Cli, ExternalDataEscape) {
  TempDir dir;
  ModelBuilder b = ModelBuilder::relu();
  auto* t = b.initializer("w", kFloat, {1});
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* e = t->add_external_data();
  e->set_key("location");
  e->set_value("../../etc/passwd");
  expect_bad_input("run " + dir.write("m.onnx", b.bytes()), "'..'");
}

TEST(Cli, DeeplyNestedSubgraphs) {
  TempDir dir;
  // 500 nested messages, each a GraphProto with one node holding the next as an attribute.
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  for (int i = 0; i < 500; ++i) {
    auto* a = g->add_node()->add_attribute();
    a->set_name("then_branch");
    a->set_type(onnx::AttributeProto::GRAPH);
    g = a->mutable_g();
  }
  expect_bad_input("info " + dir.write("m.onnx", m.SerializeAsString()), "parse");
}

TEST(Cli, TensorAboveMaxTensorBytes) {
  TempDir dir;
  expect_bad_input("run --max-tensor-bytes 8 " + dir.write("m.onnx", ModelBuilder::relu().bytes()),
                   "limit of 8 bytes");
}

TEST(Cli, BadPlanJson) {
  TempDir dir;
  std::string model = dir.write("m.onnx", ModelBuilder::relu().bytes());
  std::string plan = dir.write("PLAN.json", "{\"format\": \"collage-plan\", ");
  expect_bad_input("run " + model + " --plan " + plan, "malformed plan");
}

TEST(Cli, PlanForAnotherModel) {
  TempDir dir;
  std::string model = dir.write("m.onnx", ModelBuilder::relu().bytes());
  std::string plan =
      dir.write("PLAN.json",
                R"({"format": "collage-plan", "version": 1, "model_hash": "abc", "groups": []})");
  expect_bad_input("run " + model + " --plan " + plan, "another model");
}

// Not bad input, but the one CLI output a test must read: `run --profile` lists the steps
// with their in-model times and sums them per backend.
TEST(Cli, RunProfileListsSteps) {
  TempDir dir;
  std::string model = dir.write("m.onnx", ModelBuilder::relu().bytes());
  std::string out = dir.file("stdout.txt");
  std::string cmd =
      std::string(COLLAGE_CLI) + " run " + model + " --profile --repeat 3 >" + out + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in(out);
  std::stringstream s;
  s << in.rdbuf();
  const std::string text = s.str();
  EXPECT_NE(text.find("profile: median of 5 runs per step"), std::string::npos) << text;
  EXPECT_NE(text.find("by backend:"), std::string::npos) << text;
  EXPECT_NE(text.find("reference"), std::string::npos) << text;
  EXPECT_NE(text.find(" relu"), std::string::npos) << "the step's node is named\n" << text;
  EXPECT_NE(text.find("latency: median"), std::string::npos) << text;
}

}  // namespace
}  // namespace collage::robustness

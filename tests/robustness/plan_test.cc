// Malformed PLAN.json files for `collage run --plan` / Session(graph, plan): each must be
// refused with the exact kind and a message naming what is wrong.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "collage/backend.h"
#include "collage/error.h"
#include "collage/model.h"
#include "collage/plan.h"
#include "collage/session.h"
#include "model_builder.h"

namespace collage::robustness {
namespace {

using nlohmann::json;

// x -> Relu(r1) -> Relu(r2) -> y, and a valid plan for it.
Graph two_relus() {
  ModelBuilder b;
  b.input("x");
  b.node("Relu", {"x"}, {"a"}, "r1");
  b.node("Relu", {"a"}, {"y"}, "r2");
  b.output("y");
  return load_model_from_bytes(b.bytes(), "");
}

json valid_plan_json(const Graph& g) {
  json j;
  j["format"] = "collage-plan";
  j["version"] = 1;
  j["model_hash"] = model_hash(g);
  j["groups"] = json::array({{{"backend", "reference"}, {"nodes", {"r1"}}},
                             {{"backend", "reference"}, {"nodes", {"r2"}}}});
  return j;
}

void expect_plan_error(const std::string& text, ErrorKind kind, const std::string& needle) {
  try {
    Plan plan = Plan::from_json(text);
    Session session(two_relus(), plan, SessionOptions{});
    ADD_FAILURE() << "plan accepted: " << text;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << "got " << error_kind_name(e.kind()) << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "'" << needle << "' not in: " << e.what();
  }
}

TEST(MalformedPlan, ValidPlanRuns) {
  Graph g = two_relus();
  Session session(two_relus(), Plan::from_json(valid_plan_json(g).dump()), SessionOptions{});
  EXPECT_EQ(session.plan().groups.size(), 2u);
}

TEST(MalformedPlan, NotJson) {
  expect_plan_error("{\"format\": ", ErrorKind::kParse, "malformed");
}

TEST(MalformedPlan, NotAnObject) {
  expect_plan_error("[1, 2, 3]", ErrorKind::kParse, "collage plan");
}

TEST(MalformedPlan, WrongFormat) {
  json j = valid_plan_json(two_relus());
  j["format"] = "something-else";
  expect_plan_error(j.dump(), ErrorKind::kParse, "collage-plan");
}

TEST(MalformedPlan, FutureVersion) {
  json j = valid_plan_json(two_relus());
  j["version"] = 7;
  expect_plan_error(j.dump(), ErrorKind::kUnsupported, "version 7");
}

TEST(MalformedPlan, MissingHash) {
  json j = valid_plan_json(two_relus());
  j.erase("model_hash");
  expect_plan_error(j.dump(), ErrorKind::kParse, "model_hash");
}

TEST(MalformedPlan, WrongHash) {
  json j = valid_plan_json(two_relus());
  j["model_hash"] = "0123456789abcdef";
  expect_plan_error(j.dump(), ErrorKind::kInvalidArgument, "another model");
}

TEST(MalformedPlan, MissingGroups) {
  json j = valid_plan_json(two_relus());
  j.erase("groups");
  expect_plan_error(j.dump(), ErrorKind::kParse, "groups");
}

TEST(MalformedPlan, GroupWithoutBackend) {
  json j = valid_plan_json(two_relus());
  j["groups"][0].erase("backend");
  expect_plan_error(j.dump(), ErrorKind::kParse, "backend");
}

TEST(MalformedPlan, GroupWithoutNodes) {
  json j = valid_plan_json(two_relus());
  j["groups"][0]["nodes"] = json::array();
  expect_plan_error(j.dump(), ErrorKind::kParse, "no nodes");
}

TEST(MalformedPlan, WrongFieldType) {
  json j = valid_plan_json(two_relus());
  j["groups"][0]["nodes"] = 42;
  expect_plan_error(j.dump(), ErrorKind::kParse, "malformed");
}

TEST(MalformedPlan, UnknownBackend) {
  json j = valid_plan_json(two_relus());
  j["groups"][1]["backend"] = "no-such-backend";
  expect_plan_error(j.dump(), ErrorKind::kInvalidArgument, "no-such-backend");
}

TEST(MalformedPlan, UnknownNode) {
  json j = valid_plan_json(two_relus());
  j["groups"][1]["nodes"] = {"r2", "r9"};
  expect_plan_error(j.dump(), ErrorKind::kInvalidArgument, "'r9'");
}

TEST(MalformedPlan, NodePlacedTwice) {
  json j = valid_plan_json(two_relus());
  j["groups"][1]["nodes"] = {"r2", "r1"};
  expect_plan_error(j.dump(), ErrorKind::kInvalidArgument, "twice");
}

TEST(MalformedPlan, NodeNotPlaced) {
  json j = valid_plan_json(two_relus());
  j["groups"].erase(1);
  expect_plan_error(j.dump(), ErrorKind::kInvalidArgument, "'r2'");
}

TEST(MalformedPlan, GroupsInACycle) {
  // r1 and r3 in one group with r2 apart: each group needs the other first. Reference
  // groups run node by node, so the cycle needs a backend that compiles whole groups: the
  // broken plugin's graph-level `broken-region` (always built; the plan is refused before
  // anything compiles).
  BackendRegistry::global().load_plugin(BROKEN_PLUGIN);
  ModelBuilder b;
  b.input("x");
  b.node("Relu", {"x"}, {"a"}, "r1");
  b.node("Relu", {"a"}, {"c"}, "r2");
  b.node("Relu", {"c"}, {"y"}, "r3");
  b.output("y");
  Graph g = load_model_from_bytes(b.bytes(), "");
  json j;
  j["format"] = "collage-plan";
  j["version"] = 1;
  j["model_hash"] = model_hash(g);
  j["groups"] = json::array({{{"backend", "broken-region"}, {"nodes", {"r1", "r3"}}},
                             {{"backend", "broken-region"}, {"nodes", {"r2"}}}});
  try {
    Session session(std::move(g), Plan::from_json(j.dump()), SessionOptions{});
    ADD_FAILURE() << "a plan whose groups depend on each other was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("cycle"), std::string::npos) << e.what();
  }
}

TEST(MalformedPlan, MissingFile) {
  try {
    Plan::load("/nonexistent/PLAN.json");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/PLAN.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace collage::robustness

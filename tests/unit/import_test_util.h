// Test-only ops in the "collage.test" domain, so importer and pass tests do not depend on
// which built-in ops exist, plus helpers for the models in tests/unit/data/.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>

#include "collage/model.h"
#include "collage/op_registry.h"

namespace collage::testing {

inline const char* kTestDomain = "collage.test";

// How often the AddOne reference kernel ran (folding tests check it runs once, at load).
inline std::atomic<int> add_one_runs{0};

inline OpDef float_unary_test_op(const std::string& name, float scale, float offset) {
  OpDef def;
  def.name = name;
  def.domain = kTestDomain;
  def.kind = OpKind::kElementwise;
  def.infer = [](InferContext& ctx) {
    if (ctx.input_dtype(0) != DType::kFloat32) ctx.fail("wants float32");
    ctx.set_output(0, DType::kFloat32, ctx.input_shape(0));
  };
  def.reference = [name, scale, offset](const Graph&, const Node&) -> RefKernel {
    return [name, scale, offset](std::span<const Tensor> in, std::span<const Tensor> out) {
      if (name == "AddOne") ++add_one_runs;
      const float* x = in[0].data<float>();
      float* y = out[0].data<float>();
      for (int64_t i = 0; i < in[0].numel(); ++i) y[i] = x[i] * scale + offset;
    };
  };
  return def;
}

// AddOne (x + 1), NegT (-x) and AddW (a + b, same shapes).
inline void register_test_ops() {
  static std::once_flag once;
  std::call_once(once, [] {
    OpRegistry& r = OpRegistry::global();
    r.add(float_unary_test_op("AddOne", 1, 1));
    r.add(float_unary_test_op("NegT", -1, 0));
    OpDef add;
    add.name = "AddW";
    add.domain = kTestDomain;
    add.kind = OpKind::kElementwise;
    add.infer = [](InferContext& ctx) {
      if (ctx.input_shape(0) != ctx.input_shape(1)) ctx.fail("shapes differ");
      ctx.set_output(0, DType::kFloat32, ctx.input_shape(0));
    };
    add.reference = [](const Graph&, const Node&) -> RefKernel {
      return [](std::span<const Tensor> in, std::span<const Tensor> out) {
        for (int64_t i = 0; i < out[0].numel(); ++i)
          out[0].data<float>()[i] = in[0].data<float>()[i] + in[1].data<float>()[i];
      };
    };
    r.add(std::move(add));
  });
}

inline std::string test_data(const std::string& name) {
  return std::string(COLLAGE_TEST_DIR) + "/unit/data/" + name;
}

inline const char* kOnnxTestData = "/usr/share/libonnx-testdata/data";

// Runs `f`, expecting a collage::Error of `kind` whose message contains `needle`.
template <typename F>
void expect_error(F&& f, ErrorKind kind, const std::string& needle = "") {
  try {
    f();
    ADD_FAILURE() << "expected a " << error_kind_name(kind) << " error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "'" << needle << "' not in: " << e.what();
  }
}

}  // namespace collage::testing

// Malformed models, one fault each, built with protobuf and loaded from temp files: every
// case must end in a collage::Error of the exact kind whose message names the problem,
// never a crash, a hang or a generic error.
#include <gtest/gtest.h>

#include <climits>
#include <filesystem>
#include <fstream>

#include "collage/error.h"
#include "collage/model.h"
#include "model_builder.h"

namespace collage::robustness {
namespace {

namespace fs = std::filesystem;

// Loads `b` from a temp file: expects an Error of `kind` whose message contains `needle`.
void expect_load_error(const std::string& bytes, ErrorKind kind, const std::string& needle,
                       const LoadOptions& options = {}) {
  TempDir dir;
  std::string path = dir.write("model.onnx", bytes);
  try {
    load_model(path, options);
    ADD_FAILURE() << "expected a " << error_kind_name(kind) << " error containing '" << needle
                  << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << "got " << error_kind_name(e.kind()) << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "'" << needle << "' not in: " << e.what();
  }
}

void expect_load_error(ModelBuilder& b, ErrorKind kind, const std::string& needle,
                       const LoadOptions& options = {}) {
  expect_load_error(b.bytes(), kind, needle, options);
}

TEST(Malformed, BaselineLoads) {
  TempDir dir;
  Graph g = load_model(dir.write("m.onnx", ModelBuilder::relu().bytes()));
  EXPECT_EQ(g.inputs.size(), 1u);
  EXPECT_EQ(g.outputs.size(), 1u);
}

// --- bytes ---------------------------------------------------------------------------

TEST(Malformed, EmptyFileHasNoGraph) {
  expect_load_error(std::string(), ErrorKind::kInvalidModel, "no graph");
}

TEST(Malformed, TruncatedProtobuf) {
  std::string bytes = ModelBuilder::relu().bytes();
  expect_load_error(bytes.substr(0, bytes.size() - 3), ErrorKind::kParse, "truncated or corrupt");
}

TEST(Malformed, EveryPrefixFailsCleanly) {
  std::string bytes = ModelBuilder::relu().bytes();
  TempDir dir;
  for (size_t n = 0; n < bytes.size(); ++n) {
    try {
      load_model(dir.write("m.onnx", bytes.substr(0, n)));
      ADD_FAILURE() << "prefix of " << n << " bytes loaded";
    } catch (const Error& e) {
      EXPECT_TRUE(e.kind() == ErrorKind::kParse || e.kind() == ErrorKind::kInvalidModel)
          << n << " bytes: " << error_kind_name(e.kind()) << ": " << e.what();
    }
  }
}

TEST(Malformed, GarbageBytes) {
  expect_load_error(std::string("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01garbage", 18),
                    ErrorKind::kParse, "not a valid onnx.ModelProto");
}

TEST(Malformed, LengthPrefixBeyondEnd) {
  // Field 7 (graph), wire type 2, length 1 GiB, then 2 bytes.
  expect_load_error(std::string("\x3a\x80\x80\x80\x80\x04\x0a\x00", 8), ErrorKind::kParse,
                    "truncated or corrupt");
}

TEST(Malformed, EveryByteFlipFailsCleanlyOrLoads) {
  std::string bytes = ModelBuilder::relu().bytes();
  TempDir dir;
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string mutated = bytes;
    mutated[i] = static_cast<char>(mutated[i] ^ 0xa5);
    try {
      load_model(dir.write("m.onnx", mutated));
    } catch (const Error& e) {
      EXPECT_NE(e.kind(), ErrorKind::kInternal) << "byte " << i << ": " << e.what();
    }
  }
}

TEST(Malformed, MissingFile) {
  try {
    load_model("/nonexistent/collage/model.onnx");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/collage/model.onnx"), std::string::npos);
  }
}

TEST(Malformed, DirectoryInsteadOfFile) {
  TempDir dir;
  try {
    load_model(dir.path().string());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("directory"), std::string::npos) << e.what();
  }
}

// --- dtypes --------------------------------------------------------------------------

TEST(Malformed, InputWithoutElementType) {
  ModelBuilder b = ModelBuilder::relu();
  b.graph().mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(0);
  expect_load_error(b, ErrorKind::kInvalidModel, "'x'");
}

TEST(Malformed, StringInput) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::STRING);
  b.node("Identity", {"x"}, {"y"});
  b.output("y", onnx::TensorProto::STRING);
  expect_load_error(b, ErrorKind::kUnsupported, "string");
}

TEST(Malformed, UnknownElementTypeNumber) {
  ModelBuilder b = ModelBuilder::relu();
  b.graph().mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(999);
  expect_load_error(b, ErrorKind::kUnsupported, "element type 999");
}

TEST(Malformed, ComplexInitializer) {
  ModelBuilder b = ModelBuilder::relu();
  b.initializer("c", onnx::TensorProto::COMPLEX64, {1})->set_raw_data(std::string(8, '\0'));
  expect_load_error(b, ErrorKind::kUnsupported, "'c'");
}

TEST(Malformed, InitializerWithUndefinedType) {
  ModelBuilder b = ModelBuilder::relu();
  b.initializer("c", 0, {1})->set_raw_data(std::string(4, '\0'));
  expect_load_error(b, ErrorKind::kUnsupported, "'c'");
}

TEST(Malformed, ReshapeWithFloatShape) {
  ModelBuilder b;
  b.input("x");
  b.initializer("s", kFloat, {1})->add_float_data(6);
  b.node("Reshape", {"x", "s"}, {"y"}, "reshape");
  b.output("y", kFloat, {6});
  expect_load_error(b, ErrorKind::kInvalidModel, "reshape");
}

TEST(Malformed, AddOfMixedDtypes) {
  ModelBuilder b;
  b.input("a", kFloat);
  b.input("c", kInt64);
  b.node("Add", {"a", "c"}, {"y"}, "add");
  b.output("y");
  expect_load_error(b, ErrorKind::kInvalidModel, "add");
}

TEST(Malformed, DeclaredOutputDtypeDisagrees) {
  ModelBuilder b = ModelBuilder::relu();
  b.graph().mutable_output(0)->mutable_type()->mutable_tensor_type()->set_elem_type(kInt64);
  expect_load_error(b, ErrorKind::kShape, "'y'");
}

// --- dims ----------------------------------------------------------------------------

TEST(Malformed, NegativeInputDim) {
  ModelBuilder b;
  b.input("x", kFloat, {2, -3});
  b.node("Relu", {"x"}, {"y"});
  b.output("y");
  expect_load_error(b, ErrorKind::kInvalidModel, "negative dimension -3");
}

TEST(Malformed, NegativeInitializerDim) {
  ModelBuilder b = ModelBuilder::relu();
  b.initializer("w", kFloat, {-1, 4});
  expect_load_error(b, ErrorKind::kInvalidModel, "negative dimension");
}

TEST(Malformed, InputDimsProductOverflows) {
  ModelBuilder b;
  b.input("x", kFloat, {int64_t{1} << 40, int64_t{1} << 40});
  b.node("Relu", {"x"}, {"y"});
  b.output("y", kFloat, {int64_t{1} << 40, int64_t{1} << 40});
  expect_load_error(b, ErrorKind::kLimit, "64 bits");
}

TEST(Malformed, InitializerDimsProductOverflows) {
  ModelBuilder b = ModelBuilder::relu();
  b.initializer("w", kFloat, {INT64_MAX, 2});
  expect_load_error(b, ErrorKind::kLimit, "64 bits");
}

TEST(Malformed, InitializerOverflowHiddenByZeroDim) {
  // 0 x huge x huge has no elements; checking the product left to right must not overflow.
  ModelBuilder b = ModelBuilder::relu();
  b.initializer("w", kFloat, {0, INT64_MAX, INT64_MAX});
  TempDir dir;
  try {
    load_model(dir.write("m.onnx", b.bytes()));
  } catch (const Error& e) {
    EXPECT_NE(e.kind(), ErrorKind::kInternal) << e.what();
  }
}

TEST(Malformed, HugeInputDimIsLimit) {
  ModelBuilder b;
  b.input("x", kFloat, {int64_t{1} << 40});
  b.node("Relu", {"x"}, {"y"});
  b.output("y", kFloat, {int64_t{1} << 40});
  expect_load_error(b, ErrorKind::kLimit, "'x'");
}

TEST(Malformed, SymbolicDimWithoutValue) {
  ModelBuilder b = ModelBuilder::relu();
  b.graph()
      .mutable_input(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(0)
      ->set_dim_param("batch");
  expect_load_error(b, ErrorKind::kShape, "--dim batch=N");
}

TEST(Malformed, NegativeDimOption) {
  ModelBuilder b = ModelBuilder::relu();
  b.graph()
      .mutable_input(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(0)
      ->set_dim_param("batch");
  LoadOptions options;
  options.dims["batch"] = -4;
  expect_load_error(b, ErrorKind::kInvalidArgument, "--dim batch=-4", options);
}

TEST(Malformed, InputGivenInAShapeTheModelCannotTake) {
  // x [2, 4] MatMul w [4, 3]; x given as [2, 5] (inputs from files do this): the shape error
  // names the input given in another shape than declared, not only the node it broke.
  ModelBuilder b;
  b.input("x", kFloat, {2, 4});
  onnx::TensorProto* w = b.initializer("w", kFloat, {4, 3});
  for (int i = 0; i < 12; ++i) w->add_float_data(1.0f);
  b.node("MatMul", {"x", "w"}, {"y"});
  b.output("y", kFloat, {2, 3});
  LoadOptions options;
  options.input_shapes["x"] = {2, 5};
  expect_load_error(b, ErrorKind::kShape, "x: [2,5] given, [2,4] declared", options);
}

TEST(Malformed, UnknownDim) {
  ModelBuilder b = ModelBuilder::relu();
  b.graph()
      .mutable_input(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(1)
      ->clear_dim_value();
  expect_load_error(b, ErrorKind::kShape, "unknown dimension 1");
}

TEST(Malformed, InputWithoutShape) {
  ModelBuilder b = ModelBuilder::relu();
  b.graph().mutable_input(0)->mutable_type()->mutable_tensor_type()->clear_shape();
  // The ONNX checker insists on a shape for graph inputs.
  expect_load_error(b, ErrorKind::kInvalidModel, "'shape'");
}

TEST(Malformed, NegativeShapeOverride) {
  LoadOptions options;
  options.input_shapes["x"] = {2, -1};
  ModelBuilder b = ModelBuilder::relu();
  expect_load_error(b, ErrorKind::kInvalidArgument, "negative dim", options);
}

TEST(Malformed, ShapeOverrideForUnknownInput) {
  LoadOptions options;
  options.input_shapes["nope"] = {2};
  ModelBuilder b = ModelBuilder::relu();
  expect_load_error(b, ErrorKind::kInvalidArgument, "'nope'", options);
}

// --- graph structure -----------------------------------------------------------------

TEST(Malformed, TwoNodeCycle) {
  ModelBuilder b;
  b.input("x");
  b.node("Add", {"x", "b"}, {"a"}, "n1");
  b.node("Relu", {"a"}, {"b"}, "n2");
  b.output("b");
  expect_load_error(b, ErrorKind::kInvalidModel, "topologically sorted");
}

TEST(Malformed, SelfLoop) {
  ModelBuilder b;
  b.input("x");
  b.node("Add", {"x", "y"}, {"y"}, "self");
  b.output("y");
  expect_load_error(b, ErrorKind::kInvalidModel, "self");
}

TEST(Malformed, DanglingNodeInput) {
  ModelBuilder b;
  b.input("x");
  b.node("Add", {"x", "ghost"}, {"y"}, "add");
  b.output("y");
  expect_load_error(b, ErrorKind::kInvalidModel, "ghost");
}

TEST(Malformed, DanglingGraphOutput) {
  ModelBuilder b = ModelBuilder::relu();
  b.output("ghost");
  expect_load_error(b, ErrorKind::kInvalidModel, "ghost");
}

TEST(Malformed, NoOutputs) {
  ModelBuilder b;
  b.input("x");
  b.node("Relu", {"x"}, {"y"});
  expect_load_error(b, ErrorKind::kInvalidModel, "no outputs");
}

TEST(Malformed, NoGraph) {
  ModelBuilder b = ModelBuilder::relu();
  b.model().clear_graph();
  expect_load_error(b, ErrorKind::kInvalidModel, "no graph");
}

TEST(Malformed, DuplicateNodeOutput) {
  ModelBuilder b = ModelBuilder::relu();
  b.node("Relu", {"x"}, {"y"}, "again");
  expect_load_error(b, ErrorKind::kInvalidModel, "'y'");
}

TEST(Malformed, NodeOverwritesGraphInput) {
  ModelBuilder b = ModelBuilder::relu();
  b.node("Relu", {"y"}, {"x"}, "back");
  expect_load_error(b, ErrorKind::kInvalidModel, "'x'");
}

TEST(Malformed, DuplicateInitializer) {
  ModelBuilder b = ModelBuilder::relu();
  b.initializer("w", kFloat, {1})->add_float_data(1);
  b.initializer("w", kFloat, {1})->add_float_data(2);
  expect_load_error(b, ErrorKind::kInvalidModel, "'w'");
}

TEST(Malformed, DuplicateGraphInput) {
  ModelBuilder b = ModelBuilder::relu();
  b.input("x");
  expect_load_error(b, ErrorKind::kInvalidModel, "'x'");
}

TEST(Malformed, UnnamedInitializer) {
  ModelBuilder b = ModelBuilder::relu();
  b.initializer("", kFloat, {1})->add_float_data(1);
  expect_load_error(b, ErrorKind::kInvalidModel, "no name");
}

TEST(Malformed, DuplicateNodeNamesStillLoad) {
  // ONNX allows repeated node names; collage renames rather than fails, so plans stay unique.
  ModelBuilder b;
  b.input("x");
  b.node("Relu", {"x"}, {"a"}, "same");
  b.node("Relu", {"a"}, {"y"}, "same");
  b.output("y");
  TempDir dir;
  LoadOptions options;
  options.optimize = false;
  Graph g = load_model(dir.write("m.onnx", b.bytes()), options);
  ASSERT_EQ(g.nodes().size(), 2u);
  EXPECT_NE(g.nodes()[0].name, g.nodes()[1].name);
}

// --- initializer sizes ---------------------------------------------------------------

TEST(Malformed, RawDataTooShort) {
  ModelBuilder b = ModelBuilder::relu();
  b.initializer("w", kFloat, {2, 3})->set_raw_data(std::string(20, '\0'));
  expect_load_error(b, ErrorKind::kInvalidModel, "20 bytes of raw data");
}

TEST(Malformed, RawDataTooLong) {
  ModelBuilder b = ModelBuilder::relu();
  b.initializer("w", kFloat, {2})->set_raw_data(std::string(12, '\0'));
  expect_load_error(b, ErrorKind::kInvalidModel, "'w'");
}

TEST(Malformed, FloatDataCountMismatch) {
  ModelBuilder b = ModelBuilder::relu();
  auto* t = b.initializer("w", kFloat, {4});
  t->add_float_data(1);
  t->add_float_data(2);
  expect_load_error(b, ErrorKind::kInvalidModel, "2 elements of data");
}

TEST(Malformed, Int64DataCountMismatch) {
  ModelBuilder b = ModelBuilder::relu();
  auto* t = b.initializer("w", kInt64, {1});
  t->add_int64_data(1);
  t->add_int64_data(2);
  expect_load_error(b, ErrorKind::kInvalidModel, "'w'");
}

TEST(Malformed, TypedDataInTheWrongField) {
  ModelBuilder b = ModelBuilder::relu();
  b.initializer("w", kInt64, {1})->add_float_data(1);
  expect_load_error(b, ErrorKind::kInvalidModel, "0 elements of data");
}

TEST(Malformed, ScalarWithRawDataOfAVector) {
  ModelBuilder b = ModelBuilder::relu();
  b.initializer("w", kFloat, {})->set_raw_data(std::string(8, '\0'));
  expect_load_error(b, ErrorKind::kInvalidModel, "'w'");
}

TEST(Malformed, HugeDimsWithTinyRawData) {
  ModelBuilder b = ModelBuilder::relu();
  b.initializer("w", kFloat, {int64_t{1} << 31, 4})->set_raw_data("abcd");
  expect_load_error(b, ErrorKind::kLimit, "'w'");
}

TEST(Malformed, InitializerAboveMaxTensorBytes) {
  ModelBuilder b = ModelBuilder::relu();
  b.initializer("w", kFloat, {64})->set_raw_data(std::string(256, '\0'));
  LoadOptions options;
  options.max_tensor_bytes = 100;
  expect_load_error(b, ErrorKind::kLimit, "limit of 100 bytes", options);
}

TEST(Malformed, InputAboveMaxTensorBytes) {
  LoadOptions options;
  options.max_tensor_bytes = 16;
  ModelBuilder b = ModelBuilder::relu();
  expect_load_error(b, ErrorKind::kLimit, "input 'x'", options);
}

TEST(Malformed, InferredTensorAboveMaxTensorBytes) {
  // x is 24 bytes (under the limit), Concat(x, x) 48 (over it).
  ModelBuilder b;
  b.input("x");
  ModelBuilder::int_attr(b.node("Concat", {"x", "x"}, {"y"}, "cat"), "axis", 0);
  b.output("y", kFloat, {4, 3});
  LoadOptions options;
  options.max_tensor_bytes = 40;
  expect_load_error(b, ErrorKind::kLimit, "cat", options);
}

TEST(Malformed, TensorAttributeAboveMaxTensorBytes) {
  ModelBuilder b;
  auto* n = b.node("Constant", {}, {"y"}, "const");
  auto* a = n->add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  a->mutable_t()->set_data_type(kFloat);
  a->mutable_t()->add_dims(64);
  a->mutable_t()->set_raw_data(std::string(256, '\0'));
  b.output("y", kFloat, {64});
  LoadOptions options;
  options.max_tensor_bytes = 100;
  expect_load_error(b, ErrorKind::kLimit, "limit of 100 bytes", options);
}

// --- external data -------------------------------------------------------------------

onnx::TensorProto* external(ModelBuilder& b, const std::string& location,
                            const std::vector<std::pair<std::string, std::string>>& extra = {}) {
  auto* t = b.initializer("w", kFloat, {4});
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* e = t->add_external_data();
  e->set_key("location");
  e->set_value(location);
  for (const auto& [k, v] : extra) {
    auto* x = t->add_external_data();
    x->set_key(k);
    x->set_value(v);
  }
  return t;
}

TEST(Malformed, ExternalDataDotDot) {
  ModelBuilder b = ModelBuilder::relu();
  external(b, "../weights.bin");
  expect_load_error(b, ErrorKind::kPathViolation, "'..'");
}

TEST(Malformed, ExternalDataDotDotInTheMiddle) {
  ModelBuilder b = ModelBuilder::relu();
  external(b, "sub/../../etc/passwd");
  expect_load_error(b, ErrorKind::kPathViolation, "'..'");
}

TEST(Malformed, ExternalDataAbsolutePath) {
  ModelBuilder b = ModelBuilder::relu();
  external(b, "/etc/passwd");
  expect_load_error(b, ErrorKind::kPathViolation, "/etc/passwd");
}

TEST(Malformed, ExternalDataEmptyLocation) {
  ModelBuilder b = ModelBuilder::relu();
  external(b, "");
  expect_load_error(b, ErrorKind::kPathViolation, "relative path");
}

TEST(Malformed, ExternalDataMissingFile) {
  ModelBuilder b = ModelBuilder::relu();
  external(b, "missing.bin");
  expect_load_error(b, ErrorKind::kIo, "missing.bin");
}

TEST(Malformed, ExternalDataSymlinkLeavesFolder) {
  TempDir dir;
  fs::create_symlink("/etc/hostname", dir.file("link.bin"));
  ModelBuilder b = ModelBuilder::relu();
  external(b, "link.bin");
  std::string path = dir.write("m.onnx", b.bytes());
  try {
    load_model(path);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kPathViolation) << e.what();
    EXPECT_NE(std::string(e.what()).find("outside the model's folder"), std::string::npos);
  }
}

TEST(Malformed, ExternalDataShortFileAndBadOffsets) {
  TempDir dir;
  dir.write("w.bin", std::string(8, '\0'));
  struct Case {
    std::vector<std::pair<std::string, std::string>> extra;
    ErrorKind kind;
    std::string needle;
  };
  const Case cases[] = {
      {{}, ErrorKind::kIo, "short read"},
      {{{"offset", "-8"}}, ErrorKind::kInvalidModel, "offset '-8'"},
      {{{"offset", "12abc"}}, ErrorKind::kInvalidModel, "offset '12abc'"},
      {{{"offset", "99999999999999999999999"}}, ErrorKind::kInvalidModel, "not a valid number"},
      {{{"offset", "4611686018427387904"}}, ErrorKind::kIo, "short read"},
      {{{"length", "8"}}, ErrorKind::kInvalidModel, "length 8"},
  };
  for (const Case& c : cases) {
    ModelBuilder b = ModelBuilder::relu();
    external(b, "w.bin", c.extra);
    std::string path = dir.write("m.onnx", b.bytes());
    try {
      load_model(path);
      ADD_FAILURE() << c.needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), c.kind) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos) << e.what();
    }
  }
}

TEST(Malformed, ExternalDataFromMemoryIsRefused) {
  ModelBuilder b = ModelBuilder::relu();
  external(b, "w.bin");
  try {
    load_model_from_bytes(b.bytes(), "");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kPathViolation) << e.what();
    EXPECT_NE(std::string(e.what()).find("loaded from memory"), std::string::npos);
  }
}

TEST(Malformed, ExternalDataDirectory) {
  TempDir dir;
  fs::create_directories(dir.file("sub"));
  ModelBuilder b = ModelBuilder::relu();
  external(b, "sub");
  std::string path = dir.write("m.onnx", b.bytes());
  try {
    load_model(path);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo) << e.what();
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
}

// --- subgraphs -----------------------------------------------------------------------

// An If node whose then-branch holds another If, `depth` levels deep.
ModelBuilder nested_if(int depth) {
  ModelBuilder b;
  b.input("cond", onnx::TensorProto::BOOL, {});
  onnx::GraphProto* parent = &b.graph();
  for (int i = 0; i < depth; ++i) {
    auto* n = parent->add_node();
    n->set_op_type("If");
    n->set_name("if" + std::to_string(i));
    n->add_input("cond");
    n->add_output(i == 0 ? "y" : "y" + std::to_string(i));
    auto* then_attr = n->add_attribute();
    then_attr->set_name("then_branch");
    then_attr->set_type(onnx::AttributeProto::GRAPH);
    auto* else_attr = n->add_attribute();
    else_attr->set_name("else_branch");
    else_attr->set_type(onnx::AttributeProto::GRAPH);
    else_attr->mutable_g()->set_name("else");
    onnx::GraphProto* g = then_attr->mutable_g();
    g->set_name("then" + std::to_string(i));
    auto* out = g->add_output();
    out->set_name("y" + std::to_string(i + 1));
    ModelBuilder::set_type(out, kFloat, {1});
    parent = g;
  }
  b.output("y", kFloat, {1});
  return b;
}

TEST(Malformed, IfIsUnsupported) {
  ModelBuilder b = nested_if(1);
  expect_load_error(b, ErrorKind::kUnsupported, "subgraph");
}

TEST(Malformed, ShallowNestedIfIsUnsupported) {
  ModelBuilder b = nested_if(10);
  expect_load_error(b, ErrorKind::kUnsupported, "subgraph");
}

TEST(Malformed, DeeplyNestedIfIsAParseError) {
  // Each level nests GraphProto > NodeProto > AttributeProto: protobuf's recursion guard
  // stops the parse long before the stack runs out.
  ModelBuilder b = nested_if(2000);
  expect_load_error(b, ErrorKind::kParse, "truncated or corrupt");
}

TEST(Malformed, LoopBodyIsUnsupported) {
  ModelBuilder b;
  b.input("n", kInt64, {});
  b.input("c", onnx::TensorProto::BOOL, {});
  b.input("v", kFloat, {1});
  auto* n = b.node("Loop", {"n", "c", "v"}, {"y"}, "loop");
  auto* a = n->add_attribute();
  a->set_name("body");
  a->set_type(onnx::AttributeProto::GRAPH);
  a->mutable_g()->set_name("body");
  b.output("y", kFloat, {1});
  expect_load_error(b, ErrorKind::kUnsupported, "'body' is a subgraph");
}

TEST(Malformed, GraphsAttribute) {
  ModelBuilder b = ModelBuilder::relu();
  auto* a = b.graph().mutable_node(0)->add_attribute();
  a->set_name("bodies");
  a->set_type(onnx::AttributeProto::GRAPHS);
  a->add_graphs()->set_name("g1");
  expect_load_error(b, ErrorKind::kInvalidModel, "bodies");
}

// --- ops, opsets, attributes ---------------------------------------------------------

TEST(Malformed, UnknownOpInDefaultDomain) {
  ModelBuilder b;
  b.input("x");
  b.node("FooBar", {"x"}, {"y"}, "foo");
  b.output("y");
  expect_load_error(b, ErrorKind::kInvalidModel, "FooBar");
}

TEST(Malformed, UnknownOpInCustomDomain) {
  ModelBuilder b;
  auto* id = b.model().add_opset_import();
  id->set_domain("com.example");
  id->set_version(1);
  b.input("x");
  b.node("FooBar", {"x"}, {"y"}, "foo")->set_domain("com.example");
  b.output("y");
  expect_load_error(b, ErrorKind::kUnsupported, "FooBar");
}

TEST(Malformed, OpsetTooNew) {
  ModelBuilder b = ModelBuilder::relu();
  b.model().mutable_opset_import(0)->set_version(99);
  expect_load_error(b, ErrorKind::kUnsupported, "opset 99");
}

TEST(Malformed, OpsetZero) {
  ModelBuilder b = ModelBuilder::relu();
  b.model().mutable_opset_import(0)->set_version(0);
  expect_load_error(b, ErrorKind::kUnsupported, "opset 0");
}

TEST(Malformed, OpsetNegative) {
  ModelBuilder b = ModelBuilder::relu();
  b.model().mutable_opset_import(0)->set_version(-5);
  expect_load_error(b, ErrorKind::kUnsupported, "opset -5");
}

TEST(Malformed, OpTooNewForTheOpset) {
  // Gelu appeared in opset 20; at opset 13 no schema exists for it.
  ModelBuilder b;
  b.input("x");
  b.node("Gelu", {"x"}, {"y"}, "gelu");
  b.output("y");
  expect_load_error(b, ErrorKind::kInvalidModel, "Gelu");
}

// Opsets 18-22 (past the ONNX 1.12 checker's 17): a model loads; the checker still checks the
// operators whose definitions it knows, an operator newer than the model's opset is refused,
// one collage has no kernel for is unsupported, and opset 23 is refused.
TEST(Malformed, NewerOpsetsLoadAndAreStillChecked) {
  // x -> `op` of `inputs` -> y at `opset`.
  auto one_node = [](int64_t opset, const std::string& op, const std::vector<std::string>& inputs) {
    ModelBuilder b(opset);
    b.input("x");
    b.node(op, inputs, {"y"}, "n");
    b.output("y");
    return b;
  };
  for (int64_t opset : {18, 20, 22}) {
    TempDir dir;
    EXPECT_EQ(load_model(dir.write("m.onnx", one_node(opset, "Relu", {"x"}).bytes())).opset, opset);
  }
  ModelBuilder two_inputs = one_node(20, "Relu", {"x", "x"});
  expect_load_error(two_inputs, ErrorKind::kInvalidModel, "invalid ONNX model");
  ModelBuilder early_gelu = one_node(19, "Gelu", {"x"});
  expect_load_error(early_gelu, ErrorKind::kInvalidModel, "Gelu exists from opset 20");
  ModelBuilder too_new = one_node(23, "Relu", {"x"});
  expect_load_error(too_new, ErrorKind::kUnsupported, "opset 23 is not supported");
  ModelBuilder dft = one_node(20, "DFT", {"x"});
  expect_load_error(dft, ErrorKind::kUnsupported, "DFT");
  // GroupNormalization's scale is per group to opset 20 and per channel from 21: a scale of
  // 2 values for 2 groups of 4 channels loads at 18 and is refused at 21.
  for (int64_t opset : {18, 21}) {
    ModelBuilder b(opset);
    b.input("x", kFloat, {1, 4, 3, 3});
    auto* scale = b.initializer("scale", kFloat, {2});
    scale->add_float_data(1.0f);
    scale->add_float_data(1.0f);
    auto* groups =
        b.node("GroupNormalization", {"x", "scale", "scale"}, {"y"}, "gn")->add_attribute();
    groups->set_name("num_groups");
    groups->set_type(onnx::AttributeProto::INT);
    groups->set_i(2);
    b.output("y", kFloat, {1, 4, 3, 3});
    if (opset == 18) {
      TempDir dir;
      EXPECT_EQ(load_model(dir.write("m.onnx", b.bytes())).opset, 18);
    } else {
      expect_load_error(b, ErrorKind::kShape, "one value per channel at opset 21");
    }
  }
}

TEST(Malformed, IrVersionTooNew) {
  ModelBuilder b = ModelBuilder::relu();
  b.model().set_ir_version(1000);
  expect_load_error(b, ErrorKind::kInvalidModel, "ir_version");
}

TEST(Malformed, MissingRequiredAttribute) {
  ModelBuilder b;
  b.input("x");
  b.node("Cast", {"x"}, {"y"}, "cast");
  b.output("y");
  expect_load_error(b, ErrorKind::kInvalidModel, "to");
}

TEST(Malformed, AttributeOfTheWrongType) {
  ModelBuilder b;
  b.input("x");
  auto* a = b.node("Cast", {"x"}, {"y"}, "cast")->add_attribute();
  a->set_name("to");
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s("float");
  b.output("y");
  expect_load_error(b, ErrorKind::kInvalidModel, "to");
}

TEST(Malformed, CastToUnsupportedType) {
  ModelBuilder b;
  b.input("x");
  ModelBuilder::int_attr(b.node("Cast", {"x"}, {"y"}, "cast"), "to", onnx::TensorProto::COMPLEX128);
  b.output("y", onnx::TensorProto::COMPLEX128);
  expect_load_error(b, ErrorKind::kUnsupported, "cast");
}

TEST(Malformed, SparseInitializer) {
  ModelBuilder b = ModelBuilder::relu();
  auto* s = b.graph().add_sparse_initializer();
  s->mutable_values()->set_name("sp");
  s->mutable_values()->set_data_type(kFloat);
  expect_load_error(b, ErrorKind::kUnsupported, "sparse");
}

TEST(Malformed, SequenceInput) {
  ModelBuilder b;
  auto* in = b.graph().add_input();
  in->set_name("x");
  in->mutable_type()
      ->mutable_sequence_type()
      ->mutable_elem_type()
      ->mutable_tensor_type()
      ->set_elem_type(kFloat);
  b.node("Identity", {"x"}, {"y"});
  auto* out = b.graph().add_output();
  out->set_name("y");
  out->mutable_type()
      ->mutable_sequence_type()
      ->mutable_elem_type()
      ->mutable_tensor_type()
      ->set_elem_type(kFloat);
  expect_load_error(b, ErrorKind::kUnsupported, "sequence");
}

// --- shapes --------------------------------------------------------------------------

TEST(Malformed, AddOfIncompatibleShapes) {
  ModelBuilder b;
  b.input("a", kFloat, {2, 3});
  b.input("c", kFloat, {4, 5});
  b.node("Add", {"a", "c"}, {"y"}, "add");
  b.output("y");
  expect_load_error(b, ErrorKind::kShape, "add");
}

TEST(Malformed, MatMulInnerDimsDisagree) {
  ModelBuilder b;
  b.input("a", kFloat, {2, 3});
  b.input("c", kFloat, {4, 5});
  b.node("MatMul", {"a", "c"}, {"y"}, "mm");
  b.output("y", kFloat, {2, 5});
  expect_load_error(b, ErrorKind::kShape, "mm");
}

TEST(Malformed, ReshapeToTheWrongSize) {
  ModelBuilder b = ModelBuilder();
  b.input("x");
  auto* s = b.initializer("s", kInt64, {1});
  s->add_int64_data(7);
  b.node("Reshape", {"x", "s"}, {"y"}, "reshape");
  b.output("y", kFloat, {7});
  expect_load_error(b, ErrorKind::kShape, "reshape");
}

TEST(Malformed, ReshapeShapeOverflows) {
  ModelBuilder b = ModelBuilder();
  b.input("x", kFloat, {0});
  auto* s = b.initializer("s", kInt64, {3});
  s->add_int64_data(0);
  s->add_int64_data(INT64_MAX);
  s->add_int64_data(INT64_MAX);
  b.node("Reshape", {"x", "s"}, {"y"}, "reshape");
  b.output("y", kFloat, {0, INT64_MAX, INT64_MAX});
  TempDir dir;
  try {
    load_model(dir.write("m.onnx", b.bytes()));
  } catch (const Error& e) {
    EXPECT_NE(e.kind(), ErrorKind::kInternal) << e.what();
  }
}

TEST(Malformed, ExpandToOverflowingShape) {
  ModelBuilder b;
  b.input("x", kFloat, {1});
  auto* s = b.initializer("s", kInt64, {2});
  s->add_int64_data(int64_t{1} << 40);
  s->add_int64_data(int64_t{1} << 40);
  b.node("Expand", {"x", "s"}, {"y"}, "expand");
  b.output("y", kFloat, {int64_t{1} << 40, int64_t{1} << 40});
  expect_load_error(b, ErrorKind::kLimit, "expand");
}

TEST(Malformed, TileToHugeShape) {
  ModelBuilder b;
  b.input("x", kFloat, {2});
  auto* s = b.initializer("r", kInt64, {1});
  s->add_int64_data(int64_t{1} << 62);
  b.node("Tile", {"x", "r"}, {"y"}, "tile");
  b.output("y", kFloat, {int64_t{1} << 62});
  expect_load_error(b, ErrorKind::kLimit, "tile");
}

TEST(Malformed, PadsOverflow) {
  ModelBuilder b;
  b.input("x", kFloat, {2});
  auto* p = b.initializer("p", kInt64, {2});
  p->add_int64_data(INT64_MAX);
  p->add_int64_data(INT64_MAX);
  b.node("Pad", {"x", "p"}, {"y"}, "pad");
  b.output("y", kFloat, {2});
  expect_load_error(b, ErrorKind::kLimit, "pad");
}

TEST(Malformed, DeclaredOutputShapeDisagrees) {
  ModelBuilder b = ModelBuilder::relu();
  b.graph()
      .mutable_output(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(0)
      ->set_dim_value(5);
  expect_load_error(b, ErrorKind::kShape, "'y'");
}

TEST(Malformed, ConcatAxisOutOfRange) {
  ModelBuilder b;
  b.input("x");
  ModelBuilder::int_attr(b.node("Concat", {"x", "x"}, {"y"}, "cat"), "axis", 7);
  b.output("y", kFloat, {4, 3});
  expect_load_error(b, ErrorKind::kShape, "cat");
}

TEST(Malformed, TensorFileTruncated) {
  TempDir dir;
  onnx::TensorProto t;
  t.set_data_type(kFloat);
  t.add_dims(4);
  t.set_raw_data(std::string(16, '\0'));
  std::string bytes = t.SerializeAsString();
  std::string path = dir.write("t.pb", bytes.substr(0, bytes.size() - 5));
  try {
    read_tensor_file(path);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kParse) << e.what();
    EXPECT_NE(std::string(e.what()).find("t.pb"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace collage::robustness

// ONNX import and TensorProto file IO: valid models, the conformance corpus, and every
// kind of hostile input the importer must turn into the right Error.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "collage/model.h"
#include "graph_builder.h"
#include "import_test_util.h"

namespace collage {
namespace {

namespace fs = std::filesystem;
using testing::expect_error;
using testing::GraphBuilder;
using testing::test_data;

class Import : public ::testing::Test {
 protected:
  void SetUp() override { testing::register_test_ops(); }
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST_F(Import, SmallModelWithInitializerAndConstantOutput) {
  Graph g = load_model(test_data("add_w.onnx"));
  EXPECT_EQ(g.opset, 13);
  ASSERT_EQ(g.inputs.size(), 1u);
  EXPECT_EQ(g.value(g.inputs[0]).name, "x");
  EXPECT_EQ(g.value(g.inputs[0]).dtype, DType::kFloat32);
  EXPECT_EQ(g.value(g.inputs[0]).shape, (Shape{2, 3}));
  ASSERT_EQ(g.num_nodes(), 1u);
  EXPECT_EQ(g.node(0).op_type, "AddW");
  EXPECT_EQ(g.node(0).domain, testing::kTestDomain);
  EXPECT_EQ(g.node(0).name, "AddW_0");  // unnamed nodes get <op_type>_<index>
  ASSERT_EQ(g.outputs.size(), 2u);
  const Value& y = g.value(g.outputs[0]);
  EXPECT_EQ(y.shape, (Shape{2, 3}));
  EXPECT_TRUE(y.shape_known);
  EXPECT_EQ(y.producer, 0);
  // An initializer that is a graph output stays a constant output.
  const Value& w = g.value(g.outputs[1]);
  ASSERT_TRUE(w.is_constant());
  EXPECT_EQ(w.constant.to_float_vector(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST_F(Import, FromBytesMatchesFromFile) {
  Graph g = load_model_from_bytes(read_bytes(test_data("add_w.onnx")), "");
  EXPECT_EQ(g.num_nodes(), 1u);
  EXPECT_EQ(g.num_values(), 3u);
}

// A regular file is mapped; a pipe cannot be and is read in chunks (onnx_proto_util.h,
// FileBytes): both give the same model, and an empty file is an invalid model, not a crash.
TEST_F(Import, ModelThroughAPipeAndAnEmptyFile) {
  const fs::path dir = fs::path(::testing::TempDir()) / "collage_import_pipe";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path fifo = dir / "model.onnx";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  const std::string bytes = read_bytes(test_data("add_w.onnx"));
  std::thread writer([&] {
    std::ofstream out(fifo, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  });
  Graph from_pipe = load_model(fifo.string());
  writer.join();
  EXPECT_EQ(from_pipe.num_nodes(), 1u);
  const auto w = from_pipe.find_value("w");
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(from_pipe.value(*w).constant.to_float_vector(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  const fs::path empty = dir / "empty.onnx";
  std::ofstream(empty).close();
  expect_error([&] { load_model(empty.string()); }, ErrorKind::kInvalidModel, "no graph");
  fs::remove_all(dir);
}

TEST_F(Import, ExternalDataInsideTheFolder) {
  Graph g = load_model(test_data("external_ok.onnx"));
  auto w = g.find_value("w");
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(g.value(*w).constant.to_float_vector(), (std::vector<float>{2, 3, 4, 5}));
}

TEST_F(Import, ExternalDataMayNotLeaveTheFolder) {
  expect_error([] { load_model(test_data("external_escape.onnx")); }, ErrorKind::kPathViolation,
               "..");
  expect_error([] { load_model(test_data("external_absolute.onnx")); }, ErrorKind::kPathViolation,
               "/etc/passwd");
  // From memory there is no folder, so no external data at all.
  expect_error([] { load_model_from_bytes(read_bytes(test_data("external_ok.onnx")), ""); },
               ErrorKind::kPathViolation, "external");
}

TEST_F(Import, ExternalDataSymlinkOutsideTheFolder) {
  fs::path dir = fs::path(::testing::TempDir()) / "collage_import_symlink";
  fs::remove_all(dir);
  fs::create_directories(dir / "model");
  fs::copy_file(test_data("external_ok.onnx"), dir / "model" / "m.onnx");
  fs::copy_file(test_data("external_ok.bin"), dir / "outside.bin");
  fs::create_symlink(dir / "outside.bin", dir / "model" / "external_ok.bin");
  expect_error([&] { load_model((dir / "model" / "m.onnx").string()); }, ErrorKind::kPathViolation,
               "outside");
  // A symlink that stays inside the folder is fine.
  fs::remove(dir / "model" / "external_ok.bin");
  fs::copy_file(test_data("external_ok.bin"), dir / "model" / "real.bin");
  fs::create_symlink("real.bin", dir / "model" / "external_ok.bin");
  EXPECT_EQ(load_model((dir / "model" / "m.onnx").string()).num_nodes(), 1u);
  fs::remove_all(dir);
}

TEST_F(Import, ExternalDataMissingOrShort) {
  expect_error([] { load_model(test_data("external_missing.onnx")); }, ErrorKind::kIo,
               "missing.bin");
  expect_error([] { load_model(test_data("external_short.onnx")); }, ErrorKind::kIo, "short read");
}

TEST_F(Import, UnreadableOrCorruptFiles) {
  expect_error([] { load_model(test_data("no_such_model.onnx")); }, ErrorKind::kIo,
               "no_such_model.onnx");
  expect_error([] { load_model(test_data("")); }, ErrorKind::kIo);
  expect_error([] { load_model(test_data("truncated.onnx")); }, ErrorKind::kParse,
               "truncated.onnx");
  expect_error([] { load_model_from_bytes(std::string("\xff\xff\xff\xff garbage", 13), ""); },
               ErrorKind::kParse);
}

TEST_F(Import, InitializerChecks) {
  expect_error([] { load_model(test_data("init_size_mismatch.onnx")); }, ErrorKind::kInvalidModel,
               "'w'");
  expect_error([] { load_model(test_data("init_negative_dim.onnx")); }, ErrorKind::kInvalidModel,
               "negative");
  expect_error([] { load_model(test_data("huge_initializer.onnx")); }, ErrorKind::kLimit, "'w'");
  LoadOptions tiny;
  tiny.max_tensor_bytes = 16;  // w is 24 bytes
  expect_error([&] { load_model(test_data("add_w.onnx"), tiny); }, ErrorKind::kLimit, "'w'");
}

TEST_F(Import, GraphStructureErrors) {
  expect_error([] { load_model(test_data("dangling_input.onnx")); }, ErrorKind::kInvalidModel,
               "nope");
  expect_error([] { load_model(test_data("duplicate_output.onnx")); }, ErrorKind::kInvalidModel,
               "'y'");
  expect_error([] { load_model(test_data("missing_output.onnx")); }, ErrorKind::kInvalidModel,
               "'z'");
}

TEST_F(Import, HugeInputIsALimitError) {
  expect_error([] { load_model(test_data("huge_input.onnx")); }, ErrorKind::kLimit, "'x'");
}

TEST_F(Import, UnknownOpIsUnsupported) {
  expect_error([] { load_model(test_data("unknown_op.onnx")); }, ErrorKind::kUnsupported, "Foo");
}

TEST_F(Import, UnsupportedModelFeatures) {
  expect_error([] { load_model(test_data("if_graph.onnx")); }, ErrorKind::kUnsupported, "subgraph");
  expect_error([] { load_model(test_data("sequence_input.onnx")); }, ErrorKind::kUnsupported,
               "sequence");
  expect_error([] { load_model(test_data("opset_too_new.onnx")); }, ErrorKind::kUnsupported,
               "opset 23");
}

TEST_F(Import, SymbolicDims) {
  expect_error([] { load_model(test_data("symbolic_dim.onnx")); }, ErrorKind::kShape,
               "--dim batch=N");
  LoadOptions options;
  options.dims["batch"] = 5;
  Graph g = load_model(test_data("symbolic_dim.onnx"), options);
  EXPECT_EQ(g.value(g.inputs[0]).shape, (Shape{5, 3}));
  EXPECT_EQ(g.value(g.outputs[0]).shape, (Shape{5, 3}));
  // A name no input uses is an error, naming the ones there are (a misspelt --dim was
  // silently ignored); with the input's shape given, its dim's name still counts.
  options.dims["batc"] = 5;
  expect_error([&] { load_model(test_data("symbolic_dim.onnx"), options); },
               ErrorKind::kInvalidArgument, "no symbolic dimension 'batc' (theirs: batch)");
  LoadOptions fixed;
  fixed.dims["batch"] = 1;
  expect_error([&] { load_model(test_data("add_w.onnx"), fixed); }, ErrorKind::kInvalidArgument,
               "every input dimension is fixed");
  options.dims.erase("batc");
  options.input_shapes["x"] = {2, 3};
  EXPECT_EQ(load_model(test_data("symbolic_dim.onnx"), options).value(0).shape, (Shape{2, 3}));
}

TEST_F(Import, InputShapeOverrides) {
  LoadOptions options;
  options.input_shapes["x"] = {7, 3};
  Graph g = load_model(test_data("symbolic_dim.onnx"), options);
  EXPECT_EQ(g.value(g.outputs[0]).shape, (Shape{7, 3}));
  // Overriding with another rank is allowed; declared dims then no longer bind.
  options.input_shapes["x"] = {2, 2, 2};
  EXPECT_EQ(load_model(test_data("symbolic_dim.onnx"), options).value(0).shape.size(), 3u);
  options.input_shapes = {{"nope", {1}}};
  options.dims["batch"] = 1;
  expect_error([&] { load_model(test_data("symbolic_dim.onnx"), options); },
               ErrorKind::kInvalidArgument, "nope");
}

TEST_F(Import, DeclaredOutputShapeMustMatch) {
  expect_error([] { load_model(test_data("wrong_declared.onnx")); }, ErrorKind::kShape, "'y'");
}

TEST_F(Import, ConformanceConvModel) {
  Graph g = load_model(std::string(testing::kOnnxTestData) +
                       "/node/test_conv_with_strides_padding/model.onnx");
  EXPECT_EQ(g.opset, 11);
  ASSERT_EQ(g.inputs.size(), 2u);
  EXPECT_EQ(g.value(g.inputs[1]).shape, (Shape{1, 1, 3, 3}));
  ASSERT_EQ(g.num_nodes(), 1u);
  EXPECT_EQ(g.value(g.outputs[0]).shape, (Shape{1, 1, 4, 3}));
  // 4x3 outputs x 3x3 kernel = 108 MACs.
  EXPECT_DOUBLE_EQ(model_stats(g).gflops, 2 * 108 / 1e9);
  EXPECT_EQ(model_stats(g).parameters, 0);  // the weight is a runtime input here
}

TEST_F(Import, PytorchModelWithInitializerInputs) {
  // Opset 6; the weight and bias are listed as graph inputs and have initializers.
  Graph g =
      load_model(std::string(testing::kOnnxTestData) + "/pytorch-converted/test_Conv2d/model.onnx");
  EXPECT_EQ(g.opset, 6);
  ASSERT_EQ(g.inputs.size(), 1u);
  EXPECT_EQ(g.value(g.inputs[0]).shape, (Shape{2, 3, 7, 5}));
  EXPECT_EQ(g.value(g.outputs[0]).shape, (Shape{2, 4, 5, 4}));
  EXPECT_EQ(model_stats(g).parameters, 4 * 3 * 3 * 2 + 4);
  EXPECT_EQ(model_stats(g).op_histogram.at("Conv"), 1);
}

TEST_F(Import, LegacyBroadcastOfAGraphInput) {
  Graph g = load_model(std::string(testing::kOnnxTestData) +
                       "/pytorch-operator/test_operator_add_broadcast/model.onnx");
  ASSERT_EQ(g.num_nodes(), 1u);
  EXPECT_FALSE(g.node(0).has_attr("broadcast"));  // rewritten to numpy broadcasting
  EXPECT_EQ(g.value(g.outputs[0]).shape, (Shape{2, 3}));
}

// An initializer's raw data becomes the graph's constant without a copy (onnx_proto_util.h,
// take_tensor_from_proto): the values must be the file's and outlive the parsed proto, which
// load_model_from_bytes has freed by the time it returns.
TEST_F(Import, InitializerRawDataOutlivesTheParse) {
  GraphBuilder b;
  const ValueId x = b.input("x", DType::kFloat32, {4, 3});
  const ValueId w = b.random_constant("w", {4, 3});
  const ValueId s = b.random_constant("s", {1});  // smaller than a string's inline buffer
  const ValueId y = b.add1("Add", {x, w});
  b.output(b.add1("Mul", {y, s}));
  const Graph built = b.finish();
  const Graph g = load_model_from_bytes(model_to_bytes(built), "");
  for (ValueId v : {w, s}) {
    const std::string& name = built.value(v).name;
    const auto loaded = g.find_value(name);
    ASSERT_TRUE(loaded.has_value()) << name;
    EXPECT_TRUE(g.value(*loaded).constant.owns_storage()) << name;
    EXPECT_EQ(g.value(*loaded).constant.to_float_vector(),
              built.value(v).constant.to_float_vector())
        << name;
  }
}

TEST(TensorAdopt, KeepsItsStorageAlive) {
  std::shared_ptr<std::byte[]> storage(new std::byte[3 * sizeof(float)]);
  const float values[3] = {1.5f, -2.0f, 0.25f};
  std::memcpy(storage.get(), values, sizeof values);
  const Tensor t = Tensor::adopt(DType::kFloat32, {3}, std::move(storage));
  EXPECT_TRUE(t.owns_storage());
  EXPECT_EQ(t.to_float_vector(), (std::vector<float>{1.5f, -2.0f, 0.25f}));
  expect_error([] { Tensor::adopt(DType::kFloat32, {3}, nullptr); }, ErrorKind::kInvalidArgument);
}

TEST(TensorFile, ReadsConformanceData) {
  std::string dir =
      std::string(testing::kOnnxTestData) + "/node/test_conv_with_strides_padding/test_data_set_0/";
  Tensor x = read_tensor_file(dir + "input_0.pb");
  EXPECT_EQ(x.dtype(), DType::kFloat32);
  EXPECT_EQ(x.shape(), (Shape{1, 1, 7, 5}));
  EXPECT_FLOAT_EQ(x.get_as_double(34), 34.0);  // x = arange(35)
  Tensor y = read_tensor_file(dir + "output_0.pb");
  EXPECT_EQ(y.shape(), (Shape{1, 1, 4, 3}));
  expect_error([&] { read_tensor_file(dir + "input_0.pb", 64); }, ErrorKind::kLimit);
}

TEST(TensorFile, TypedFields) {
  EXPECT_EQ(read_tensor_file(test_data("typed_int32.pb")).to_int_vector(),
            (std::vector<int64_t>{7, -8, 9}));
  Tensor b = read_tensor_file(test_data("typed_bool.pb"));
  EXPECT_EQ(b.dtype(), DType::kBool);
  EXPECT_EQ(b.to_int_vector(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(read_tensor_file(test_data("typed_int64.pb")).to_int_vector(),
            (std::vector<int64_t>{int64_t{1} << 40, -3}));
  EXPECT_DOUBLE_EQ(read_tensor_file(test_data("typed_double.pb")).get_as_double(0), 0.25);
  expect_error([] { read_tensor_file(test_data("typed_short.pb")); }, ErrorKind::kInvalidModel,
               "'s'");
  expect_error([] { read_tensor_file(test_data("string.pb")); }, ErrorKind::kUnsupported, "string");
  expect_error([] { read_tensor_file(test_data("missing.pb")); }, ErrorKind::kIo);
  expect_error([] { read_tensor_file(test_data("truncated.onnx")); }, ErrorKind::kParse);
}

TEST(TensorFile, WriteThenReadRoundTrips) {
  std::string path = ::testing::TempDir() + "/collage_roundtrip.pb";
  Tensor t = Tensor::from_vector<int16_t>({2, 2}, {1, -2, 300, -32768});
  write_tensor_file(path, t, "t");
  Tensor back = read_tensor_file(path);
  EXPECT_EQ(back.dtype(), DType::kInt16);
  EXPECT_EQ(back.shape(), (Shape{2, 2}));
  EXPECT_EQ(back.to_int_vector(), (std::vector<int64_t>{1, -2, 300, -32768}));
  std::remove(path.c_str());
  expect_error([&] { write_tensor_file("/nonexistent_dir/x.pb", t); }, ErrorKind::kIo);
  expect_error([&] { write_tensor_file(path, Tensor()); }, ErrorKind::kInvalidArgument);
}

}  // namespace
}  // namespace collage

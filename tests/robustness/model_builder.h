// Builds ONNX models programmatically so each malformed case states exactly what is wrong
// with it, instead of hiding the fault in a binary file.
#pragma once

#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace collage::robustness {

constexpr int kFloat = onnx::TensorProto::FLOAT;
constexpr int kInt64 = onnx::TensorProto::INT64;

class ModelBuilder {
 public:
  explicit ModelBuilder(int64_t opset = 13) {
    model_.set_ir_version(8);
    model_.set_producer_name("collage-robustness");
    auto* id = model_.add_opset_import();
    id->set_domain("");
    id->set_version(opset);
    model_.mutable_graph()->set_name("g");
  }

  onnx::ModelProto& model() { return model_; }
  onnx::GraphProto& graph() { return *model_.mutable_graph(); }

  static void set_type(onnx::ValueInfoProto* v, int elem, const std::vector<int64_t>& dims) {
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    auto* shape = tt->mutable_shape();
    for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
  }
  onnx::ValueInfoProto* input(const std::string& name, int elem = kFloat,
                              const std::vector<int64_t>& dims = {2, 3}) {
    auto* v = graph().add_input();
    v->set_name(name);
    set_type(v, elem, dims);
    return v;
  }
  onnx::ValueInfoProto* output(const std::string& name, int elem = kFloat,
                               const std::vector<int64_t>& dims = {2, 3}) {
    auto* v = graph().add_output();
    v->set_name(name);
    set_type(v, elem, dims);
    return v;
  }
  onnx::NodeProto* node(const std::string& op, const std::vector<std::string>& ins,
                        const std::vector<std::string>& outs, const std::string& name = "") {
    auto* n = graph().add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? op + "_" + std::to_string(graph().node_size()) : name);
    for (const auto& i : ins) n->add_input(i);
    for (const auto& o : outs) n->add_output(o);
    return n;
  }
  onnx::TensorProto* initializer(const std::string& name, int elem,
                                 const std::vector<int64_t>& dims) {
    auto* t = graph().add_initializer();
    t->set_name(name);
    t->set_data_type(elem);
    for (int64_t d : dims) t->add_dims(d);
    return t;
  }
  static onnx::AttributeProto* int_attr(onnx::NodeProto* n, const std::string& name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
    return a;
  }

  std::string bytes() const { return model_.SerializeAsString(); }

  // x[2,3] -> Relu -> y: the well-formed model most cases break one thing in.
  static ModelBuilder relu() {
    ModelBuilder b;
    b.input("x");
    b.node("Relu", {"x"}, {"y"}, "relu");
    b.output("y");
    return b;
  }

 private:
  onnx::ModelProto model_;
};

// A fresh folder per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("collage_robust_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream out(file(name), std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return file(name);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace collage::robustness

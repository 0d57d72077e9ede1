// TODO(helper): ONNX import. Stubs so the tree links.
#include "collage/model.h"

namespace collage {

Graph load_model(const std::string& path, const LoadOptions& options) {
  fail(ErrorKind::kInternal, "load_model: not implemented yet");
}
Graph load_model_from_bytes(const std::string& bytes, const std::string& base_dir,
                            const LoadOptions& options) {
  fail(ErrorKind::kInternal, "load_model_from_bytes: not implemented yet");
}
void infer_shapes(Graph& graph, const LoadOptions& options) {}
void fold_constants(Graph& graph, const LoadOptions& options) {}
void remove_dead_code(Graph& graph) {}
Tensor read_tensor_file(const std::string& path, int64_t max_tensor_bytes) {
  fail(ErrorKind::kInternal, "read_tensor_file: not implemented yet");
}
void write_tensor_file(const std::string& path, const Tensor& tensor, const std::string& name) {
  fail(ErrorKind::kInternal, "write_tensor_file: not implemented yet");
}
ModelStats model_stats(const Graph& graph) { return {}; }

}  // namespace collage

#include <onnx/onnx_pb.h>

#include <fstream>
#include <set>
#include <sstream>

#include "collage/model.h"

namespace collage {

std::vector<std::string> model_input_names(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) fail(ErrorKind::kIo, "cannot open model file '{}'", path);
  std::stringstream bytes;
  bytes << file.rdbuf();
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes.str()))
    fail(ErrorKind::kParse, "'{}' is not a valid ONNX model (protobuf parse failed)", path);
  std::set<std::string> initializers;
  for (const auto& init : model.graph().initializer()) initializers.insert(init.name());
  std::vector<std::string> names;
  for (const auto& input : model.graph().input())
    if (!initializers.count(input.name())) names.push_back(input.name());
  return names;
}

}  // namespace collage

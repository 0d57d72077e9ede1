#include <onnx/onnx_pb.h>

#include <set>

#include "collage/model.h"
#include "ir/onnx_proto_util.h"

namespace collage {

std::vector<std::string> model_input_names(const std::string& path) {
  onnx::ModelProto model;
  onnx_util::parse_message(onnx_util::FileBytes(path).view(), model, "'" + path + "'");
  std::set<std::string> initializers;
  for (const auto& init : model.graph().initializer()) initializers.insert(init.name());
  std::vector<std::string> names;
  for (const auto& input : model.graph().input())
    if (!initializers.count(input.name())) names.push_back(input.name());
  return names;
}

}  // namespace collage

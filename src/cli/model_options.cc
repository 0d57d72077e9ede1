#include "cli/commands.h"

namespace collage::cli {

void ModelOptions::add_to(CLI::App& app) {
  app.add_option("model", path, "ONNX model file")->required();
  app.add_option("--dim", dims, "value of a symbolic input dimension, NAME=VALUE (repeatable)");
  app.add_option("--max-tensor-bytes", max_tensor_bytes,
                 "refuse any tensor larger than this many bytes")
      ->capture_default_str();
}

LoadOptions ModelOptions::load_options() const {
  LoadOptions options;
  options.max_tensor_bytes = max_tensor_bytes;
  for (const std::string& d : dims) {
    auto eq = d.find('=');
    if (eq == std::string::npos || eq == 0)
      fail(ErrorKind::kInvalidArgument, "--dim expects NAME=VALUE, got '{}'", d);
    try {
      size_t used = 0;
      int64_t value = std::stoll(d.substr(eq + 1), &used);
      if (used != d.size() - eq - 1 || value < 0) throw std::invalid_argument(d);
      options.dims[d.substr(0, eq)] = value;
    } catch (const std::exception&) {
      fail(ErrorKind::kInvalidArgument, "--dim {}: the value must be a non-negative integer", d);
    }
  }
  return options;
}

}  // namespace collage::cli

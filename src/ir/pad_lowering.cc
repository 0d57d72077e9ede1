// Pad in "reflect" and "edge" mode lowered, axis by axis, to a Concat of the input and
// one-element Slices of it: pure data movement that every fast backend runs (onednn and
// onednn-graph as reorders and a concat, inside regions too), where the op itself only had
// the reference kernel, and so cut every graph-level region around it (a conv, its Relu, a
// reflect Pad and the next conv ran as three kernels on onednn-graph). Reflection padding
// is the usual border of image-to-image generators (CycleGAN's and pix2pix's ResNet blocks,
// style transfer): one Pad before each 3x3 conv. numpy.pad, which ONNX defines the modes by,
// pads a tensor axis by axis the same way, so the corners come out the same.
// A Pad with negative pads (a crop: F.pad(x, (-1, -1, -1, -1)), a U-Net's centre crop) is a
// Slice of each cropped axis, then, in "constant" mode, a Pad of the sides that grow: the
// onednn backends run both (a crop cut regions the same way).
#include <algorithm>
#include <map>

#include "ir/model_passes.h"

namespace collage {
namespace {

// Pads wider than this on one side of an axis stay one Pad on the reference kernel: each
// padded element is a Slice of its own here.
constexpr int64_t kMaxLoweredPad = 8;

// The pads of `node` as {begin per axis..., end per axis...} over the input's rank, or
// nullopt where they are not known constants.
std::optional<std::vector<int64_t>> constant_pads(const Graph& graph, const Node& node,
                                                  size_t rank) {
  if (node.has_attr("pads")) return node.attr_ints("pads");  // before opset 11
  const ValueId pads = node.input(1);
  if (pads == kNoValue || !graph.value(pads).is_constant()) return std::nullopt;
  std::vector<int64_t> values = graph.value(pads).constant.to_int_vector();
  const ValueId axes = node.input(3);  // opset 18
  if (axes == kNoValue) return values;
  if (!graph.value(axes).is_constant()) return std::nullopt;
  const std::vector<int64_t> listed = graph.value(axes).constant.to_int_vector();
  if (values.size() != 2 * listed.size()) return std::nullopt;
  std::vector<int64_t> full(2 * rank, 0);
  for (size_t i = 0; i < listed.size(); ++i) {
    const int64_t axis = listed[i] < 0 ? listed[i] + static_cast<int64_t>(rank) : listed[i];
    if (axis < 0 || axis >= static_cast<int64_t>(rank)) return std::nullopt;
    full[axis] = values[i];
    full[axis + rank] = values[i + listed.size()];
  }
  return full;
}

// Whether `node` is a reflect/edge Pad this lowering takes: shapes known, pads constant,
// none negative (a crop), each side at most kMaxLoweredPad, a reflection shorter than its
// axis, and some padding at all.
bool lowerable(const Graph& graph, const Node& node, std::vector<int64_t>& pads) {
  if (!node.domain.empty() || node.op_type != "Pad" || node.outputs.size() != 1) return false;
  const std::string mode = node.attr_string("mode", "constant");
  if (mode != "reflect" && mode != "edge") return false;
  const Value& x = graph.value(node.input(0));
  if (!x.shape_known || !graph.value(node.outputs[0]).shape_known || x.shape.empty()) return false;
  const size_t rank = x.shape.size();
  std::optional<std::vector<int64_t>> found = constant_pads(graph, node, rank);
  if (!found || found->size() != 2 * rank) return false;
  pads = *found;
  bool any = false;
  for (size_t d = 0; d < rank; ++d)
    for (const int64_t p : {pads[d], pads[d + rank]}) {
      if (p < 0 || p > kMaxLoweredPad) return false;
      if (p > 0 && (x.shape[d] < 1 || (mode == "reflect" && p >= x.shape[d]))) return false;
      any = any || p > 0;
    }
  return any;
}

void lower_one(Graph& graph, const Node& node, const std::vector<int64_t>& pads) {
  const bool reflect = node.attr_string("mode", "constant") == "reflect";
  const Shape shape = graph.value(node.input(0)).shape;
  const size_t rank = shape.size();
  std::vector<size_t> padded_axes;
  for (size_t d = 0; d < rank; ++d)
    if (pads[d] > 0 || pads[d + rank] > 0) padded_axes.push_back(d);
  int count = 0;
  ValueId value = node.input(0);
  for (const size_t d : padded_axes) {
    const int64_t length = shape[d];
    // One element of `value` along d, at `index`, sliced once however often the Concat reads
    // it (edge mode reads the border element p times).
    std::map<int64_t, ValueId> sliced;
    auto element = [&](int64_t index) {
      if (auto it = sliced.find(index); it != sliced.end()) return it->second;
      return sliced[index] = append_axis_slice(graph, node.name, count, value,
                                               static_cast<int64_t>(d), index, index + 1);
    };
    std::vector<ValueId> parts;
    // Before: reflect x[p], ..., x[1]; edge x[0] p times.
    for (int64_t k = pads[d]; k >= 1; --k) parts.push_back(element(reflect ? k : 0));
    parts.push_back(value);
    // After: reflect x[L-2], ..., x[L-1-p]; edge x[L-1] p times.
    for (int64_t k = 1; k <= pads[d + rank]; ++k)
      parts.push_back(element(reflect ? length - 1 - k : length - 1));
    const bool last = d == padded_axes.back();
    const NodeId id = append_lowered_node(graph, node.name, count, "Concat", parts,
                                          {{"axis", Attribute::from_int(static_cast<int64_t>(d))}},
                                          last ? node.outputs[0] : kNoValue);
    value = graph.node(id).outputs[0];
  }
}

// A Pad with a negative pad as Slices of the cropped axes and, in "constant" mode, a Pad of the
// rest; false where it is not one (a reflect or edge Pad that also grows stays).
bool lower_crop(Graph& graph, const Node& node) {
  if (!node.domain.empty() || node.op_type != "Pad" || node.outputs.size() != 1) return false;
  if (!graph.value(node.input(0)).shape_known || !graph.value(node.outputs[0]).shape_known)
    return false;
  const Shape shape = graph.value(node.input(0)).shape;  // a copy: appending moves the values
  const size_t rank = shape.size();
  if (rank == 0) return false;
  std::optional<std::vector<int64_t>> found = constant_pads(graph, node, rank);
  if (!found || found->size() != 2 * rank) return false;
  const std::vector<int64_t>& pads = *found;
  bool crops = false, grows = false;
  for (size_t d = 0; d < rank; ++d) {
    if (pads[d] + pads[d + rank] + shape[d] < 1) return false;  // the reference reports it
    for (const int64_t p : {pads[d], pads[d + rank]}) {
      crops = crops || p < 0;
      grows = grows || p > 0;
    }
  }
  const std::string mode = node.attr_string("mode", "constant");
  if (!crops || (grows && mode != "constant")) return false;
  std::vector<size_t> cropped;
  for (size_t d = 0; d < rank; ++d)
    if (pads[d] < 0 || pads[d + rank] < 0) cropped.push_back(d);
  int count = 0;
  ValueId value = node.input(0);
  for (const size_t d : cropped) {
    // Without a Pad after it, the last Slice writes the output.
    const ValueId out = !grows && d == cropped.back() ? node.outputs[0] : kNoValue;
    value = append_axis_slice(graph, node.name, count, value, static_cast<int64_t>(d),
                              std::max<int64_t>(0, -pads[d]),
                              shape[d] - std::max<int64_t>(0, -pads[d + rank]), out);
  }
  if (!grows) return true;
  std::vector<int64_t> rest(pads.size());
  for (size_t i = 0; i < pads.size(); ++i) rest[i] = std::max<int64_t>(0, pads[i]);
  if (node.has_attr("pads")) {  // before opset 11: pads and value are attributes
    std::map<std::string, Attribute> attrs = node.attrs;
    attrs["pads"] = Attribute::from_ints(rest);
    append_lowered_node(graph, node.name, count, "Pad", {value}, std::move(attrs), node.outputs[0]);
    return true;
  }
  std::vector<ValueId> inputs = {value,
                                 append_int64_constant(graph, node.name, count, "pads", rest)};
  if (node.input(2) != kNoValue) inputs.push_back(node.input(2));
  std::map<std::string, Attribute> attrs = {{"mode", Attribute::from_string("constant")}};
  append_lowered_node(graph, node.name, count, "Pad", inputs, std::move(attrs), node.outputs[0]);
  return true;
}

}  // namespace

void lower_edge_pads(Graph& graph) {
  lower_nodes(graph, [](Graph& g, const Node& node) {
    if (lower_crop(g, node)) return true;
    std::vector<int64_t> pads;
    if (!lowerable(g, node, pads)) return false;
    lower_one(g, node, pads);
    return true;
  });
}

}  // namespace collage

// The layers the zoo's models are made of, each emitted as PyTorch's ONNX exporter (eval
// mode, do_constant_folding=True, at the builder's opset: 13 unless a model asks for
// another) writes it, so the graphs look like the models users hand us. Weights are named
// in the current builder scope, and scaled so activations keep a sane magnitude through 50+
// layers.
#pragma once

#include <vector>

#include "models/model_builder.h"

namespace collage::models {

// A convolution over 2 or 3 spatial dims (the rank of `kernel`). Missing strides are 1,
// missing pads 0 (pads are symmetric, as PyTorch's are).
struct ConvSpec {
  int64_t out = 0;
  std::vector<int64_t> kernel;
  std::vector<int64_t> stride;
  std::vector<int64_t> pad;
  int64_t group = 1;
  bool bias = true;
  // Scales the He-initialised weights: the last conv of a residual branch uses < 1 so the
  // sum over many blocks does not blow up (as zero-init-residual and Fixup do).
  float gain = 1;
};

// Conv [+ bias]. A Conv followed by BatchNormalization in PyTorch is exported as a single
// Conv with the BatchNorm folded into its weights and bias (torch.onnx.export folds it in
// eval mode), so models call this with bias=true where the source has Conv+BN.
ValueId conv(ModelBuilder& b, ValueId x, const ConvSpec& spec);
// Shorthand for a square 2-D conv.
ValueId conv2d(ModelBuilder& b, ValueId x, int64_t out, int64_t kernel, int64_t stride = 1,
               int64_t pad = 0, int64_t group = 1, bool bias = true, float gain = 1);
ValueId conv_transpose2d(ModelBuilder& b, ValueId x, int64_t out, int64_t kernel, int64_t stride,
                         int64_t pad, bool bias);
// A per-channel bias vector, small and nonzero (what a folded BatchNorm or a trained
// bias leaves).
ValueId random_bias(ModelBuilder& b, int64_t n);
// An explicit BatchNormalization (where the exporter cannot fold it, e.g. after
// ConvTranspose). Statistics and affine parameters are random, never all-0/all-1.
ValueId batch_norm(ModelBuilder& b, ValueId x);

ValueId relu(ModelBuilder& b, ValueId x);
ValueId relu6(ModelBuilder& b, ValueId x);  // Clip(x, 0, 6) with min/max as inputs (opset 11+)
ValueId tanh(ModelBuilder& b, ValueId x);
ValueId add(ModelBuilder& b, ValueId x, ValueId y);
ValueId concat(ModelBuilder& b, const std::vector<ValueId>& xs, int64_t axis);

// Pools over the spatial dims of x (2-D or 3-D), square/cubic windows.
ValueId max_pool(ModelBuilder& b, ValueId x, int64_t kernel, int64_t stride, int64_t pad,
                 bool ceil_mode = false);
ValueId avg_pool(ModelBuilder& b, ValueId x, int64_t kernel, int64_t stride, int64_t pad,
                 bool count_include_pad);
// F.avg_pool2d(x, kernel, stride, pad) with PyTorch's default count_include_pad=True, as
// the exporter writes it below opset 19: an explicit zero Pad, then an unpadded AveragePool.
ValueId avg_pool_padded(ModelBuilder& b, ValueId x, int64_t kernel, int64_t stride, int64_t pad);
ValueId global_avg_pool(ModelBuilder& b, ValueId x);

// nn.Linear on a 2-D input: Gemm(transB=1) with the weight as PyTorch stores it, [out, in].
ValueId gemm(ModelBuilder& b, ValueId x, int64_t out, float gain = 1);
// Classifier head: Flatten(axis=1) + Gemm(transB=1), as nn.Linear on a 2-D input exports.
ValueId flatten_gemm(ModelBuilder& b, ValueId x, int64_t out);
// nn.Linear on a 3-D input: MatMul with the transposed weight, then Add(bias, ·) (the
// exporter puts the bias first).
ValueId linear(ModelBuilder& b, ValueId x, int64_t out, float gain = 1);
// nn.LayerNorm over the last dim as the exporter writes it at the builder's opset: one
// LayerNormalization node from opset 17 on; before that decomposed into ReduceMean, Sub,
// Pow, ReduceMean, Add, Sqrt, Div, Mul, Add.
ValueId layer_norm(ModelBuilder& b, ValueId x, float eps);
// Exact GELU as exported: x * 0.5 * (1 + erf(x / sqrt(2))) -> Div, Erf, Add, Mul, Mul.
ValueId gelu(ModelBuilder& b, ValueId x);
// GPT-2's tanh-approximated GELU ("gelu_new"), written out as Hugging Face's
// 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) exports:
// Mul, Pow, Mul, Add, Mul, Tanh, Add, Mul.
ValueId gelu_tanh(ModelBuilder& b, ValueId x);

}  // namespace collage::models

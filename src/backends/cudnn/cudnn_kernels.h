// The cudnn backend's kernels, each built from a standalone subgraph (a match of the
// backend's patterns):
// - Conv (1-3D, grouped, dilated; symmetric pads) with a folded BatchNormalization, a
//   residual Add and a Relu, fused into one cudnnConvolutionBiasActivationForward where cuDNN
//   offers it (a Relu; no activation with IMPLICIT_PRECOMP_GEMM), else conv + cudnnAddTensor;
// - ConvTranspose (as cuDNN's backward-data convolution) with its bias and a Relu;
// - MaxPool / AveragePool / GlobalMaxPool / GlobalAveragePool.
// Every kernel runs once at compile on zeros, so a configuration cuDNN rejects is
// Error(kUnsupported) at compile, never at run time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collage/graph.h"
#include "collage/kernel.h"

namespace collage::cudnn_backend {

// Variant names: cuDNN's forward algorithms ("implicit_gemm", "winograd", ...) and its
// backward-data ones for ConvTranspose; "" lets cuDNN's heuristics choose.
const std::vector<std::string>& conv_algorithm_names();
const std::vector<std::string>& conv_transpose_algorithm_names();

std::unique_ptr<Kernel> compile_conv(const Graph& subgraph, const std::string& variant);
std::unique_ptr<Kernel> compile_conv_transpose(const Graph& subgraph, const std::string& variant);
std::unique_ptr<Kernel> compile_pool(const Graph& subgraph);

}  // namespace collage::cudnn_backend

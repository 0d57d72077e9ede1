// The zoo's model builders, one family per file. Each returns a fully shaped graph (batch 1,
// fp32) with weights drawn from `seed`.
#pragma once

#include <cstdint>

#include "collage/graph.h"

namespace collage::models {

// resnet.cc
Graph resnet50(uint64_t seed);
Graph resnext50(uint64_t seed);
Graph resnet_tiny(uint64_t seed);
Graph resnet3d_50(uint64_t seed);
Graph resnet3d_tiny(uint64_t seed);
// mobilenet_v2.cc
Graph mobilenet_v2(uint64_t seed);
Graph mobilenet_tiny(uint64_t seed);
// bert.cc
Graph bert_base(uint64_t seed);
Graph bert_tiny(uint64_t seed);
// dcgan.cc
Graph dcgan(uint64_t seed);
Graph dcgan_tiny(uint64_t seed);
// nasnet.cc
Graph nasnet_a_mobile(uint64_t seed);
Graph nasnet_tiny(uint64_t seed);
// googlenet.cc
Graph googlenet(uint64_t seed);
Graph googlenet_tiny(uint64_t seed);
// inception_v3.cc
Graph inception_v3(uint64_t seed);
Graph inception_v3_tiny(uint64_t seed);
// gpt2.cc
Graph gpt2(uint64_t seed);
Graph gpt2_tiny(uint64_t seed);
// vit.cc
Graph vit_b16(uint64_t seed);
Graph vit_tiny(uint64_t seed);

// The transformer families at a size of the caller's choosing, exported the same way (the
// differential tests draw random sizes: odd sequence lengths, one head or several, widths off
// the 16-blocks, both LayerNorm forms). `hidden` must be a multiple of `heads`.
struct TransformerSize {
  int layers = 2;
  int64_t hidden = 64;
  int64_t heads = 2;
  int64_t ffn = 256;  // BERT's and ViT's MLP width; GPT-2's is 4 x hidden
  int64_t seq = 16;   // ViT: 1 + a square number of patches
  int64_t vocab = 100;
  int64_t opset = 13;  // LayerNorm decomposed below 17, one LayerNormalization node from 17
};
Graph bert_sized(const TransformerSize& size, uint64_t seed);
Graph gpt2_sized(const TransformerSize& size, uint64_t seed);
Graph vit_sized(const TransformerSize& size, uint64_t seed);

}  // namespace collage::models

#include "models/zoo.h"

#include "collage/error.h"
#include "models/families.h"

namespace collage::models {

const std::vector<ZooModel>& zoo_models() {
  static const std::vector<ZooModel> models = {
      {"resnet50", "ResNet-50 (torchvision), 1x3x224x224", resnet50},
      {"resnext50", "ResNeXt-50 32x4d (torchvision), 1x3x224x224", resnext50},
      {"mobilenet-v2", "MobileNetV2 (torchvision), 1x3x224x224", mobilenet_v2},
      {"bert-base", "BERT-base encoder, input_ids 1x128", bert_base},
      {"dcgan", "DCGAN generator, z 1x100x1x1 -> 1x3x64x64", dcgan},
      {"resnet3d-50", "3D ResNet-50 (Hara et al.), 1x3x16x112x112", resnet3d_50},
      {"nasnet-a-mobile", "NASNet-A Mobile, 1x3x224x224", nasnet_a_mobile},
      {"googlenet", "GoogLeNet (torchvision, no aux heads), 1x3x224x224", googlenet},
      {"inception-v3", "Inception-v3 (torchvision, no aux head), 1x3x299x299", inception_v3},
      {"gpt2", "GPT-2 small decoder + tied LM head (Hugging Face), input_ids 1x128", gpt2},
      {"vit", "ViT-B/16 (torchvision), 1x3x224x224, opset 17 LayerNormalization", vit_b16},
      {"bert-tiny", "BERT, 2 layers, hidden 128, input_ids 1x32", bert_tiny},
      {"resnet-tiny", "bottleneck ResNet, 3 blocks, 1x3x64x64", resnet_tiny},
      {"mobilenet-tiny", "MobileNetV2 x0.5, 6 blocks, 1x3x64x64", mobilenet_tiny},
      {"dcgan-tiny", "DCGAN generator, nz 16, ngf 8", dcgan_tiny},
      {"resnet3d-tiny", "3D ResNet, 2 blocks, 1x3x8x32x32", resnet3d_tiny},
      {"nasnet-tiny", "NASNet-A, 1 normal cell per stage, 1x3x64x64", nasnet_tiny},
      {"googlenet-tiny", "GoogLeNet at 1/4 width, 1x3x64x64", googlenet_tiny},
      {"inception-v3-tiny", "Inception-v3 at 1/4 width, 1x3x107x107", inception_v3_tiny},
      {"gpt2-tiny", "GPT-2, 2 layers, d 128, input_ids 1x32", gpt2_tiny},
      {"vit-tiny", "ViT, 2 layers, d 64, 16x16 patches of 1x3x64x64", vit_tiny},
  };
  return models;
}

Graph build_zoo_model(const std::string& name, uint64_t seed) {
  std::string names;
  for (const ZooModel& m : zoo_models()) {
    if (m.name == name) return m.build(seed);
    names += (names.empty() ? "" : ", ") + m.name;
  }
  fail(ErrorKind::kInvalidArgument, "no model '{}' in the zoo; known models: {}", name, names);
}

}  // namespace collage::models

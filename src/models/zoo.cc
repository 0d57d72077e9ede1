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
      {"bert-tiny", "BERT, 2 layers, hidden 128, input_ids 1x32", bert_tiny},
      {"resnet-tiny", "bottleneck ResNet, 3 blocks, 1x3x64x64", resnet_tiny},
      {"mobilenet-tiny", "MobileNetV2 x0.5, 6 blocks, 1x3x64x64", mobilenet_tiny},
      {"dcgan-tiny", "DCGAN generator, nz 16, ngf 8", dcgan_tiny},
      {"resnet3d-tiny", "3D ResNet, 2 blocks, 1x3x8x32x32", resnet3d_tiny},
      {"nasnet-tiny", "NASNet-A, 1 normal cell per stage, 1x3x64x64", nasnet_tiny},
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

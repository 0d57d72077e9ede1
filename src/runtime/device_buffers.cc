#include "runtime/device_buffers.h"

namespace collage {

DeviceBuffers::DeviceBuffers(Device& device, const std::vector<Tensor>& like, bool upload)
    : device_(device) {
  try {
    for (const Tensor& t : like) {
      if (!t.defined()) {
        views_.emplace_back();
        continue;
      }
      void* memory = t.nbytes() ? device.allocate(t.nbytes()) : nullptr;
      if (memory) memory_.push_back(memory);
      if (memory && upload) device.copy_to_device(memory, t.raw(), t.nbytes());
      views_.push_back(Tensor::view(t.dtype(), t.shape(), memory));
    }
  } catch (...) {
    for (void* m : memory_) device.release(m);
    throw;
  }
}

DeviceBuffers::~DeviceBuffers() {
  // Work still reading these buffers must finish before they go back.
  try {
    device_.synchronize();
  } catch (...) {
  }
  for (void* m : memory_) device_.release(m);
}

void DeviceBuffers::download(std::vector<Tensor>& host) const {
  for (size_t i = 0; i < views_.size() && i < host.size(); ++i)
    if (views_[i].nbytes() && host[i].nbytes() == views_[i].nbytes())
      device_.copy_to_host(host[i].raw(), views_[i].raw(), views_[i].nbytes());
  device_.synchronize();
}

}  // namespace collage

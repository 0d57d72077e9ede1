// Tensors in a device's memory for one kernel call outside an executor (measuring a device
// kernel alone, tests): allocated when made, released when destroyed, with the copies to
// and from host tensors of the same shapes.
#pragma once

#include <vector>

#include "collage/device.h"
#include "collage/tensor.h"

namespace collage {

class DeviceBuffers {
 public:
  // Device tensors shaped like `like`; their contents are copied over when `upload`.
  DeviceBuffers(Device& device, const std::vector<Tensor>& like, bool upload);
  ~DeviceBuffers();
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;

  // Views of device memory, parallel to `like` (undefined where `like` was).
  const std::vector<Tensor>& views() const { return views_; }
  // Copies every buffer into `host` (same shapes), waiting for the device.
  void download(std::vector<Tensor>& host) const;

 private:
  Device& device_;
  std::vector<Tensor> views_;
  std::vector<void*> memory_;
};

}  // namespace collage

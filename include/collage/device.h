// A device that a backend's kernels run on (a GPU), seen from the runtime: memory it can
// allocate, copies between it and the host, and a way to wait for it. The runtime knows
// devices only through this interface; the CUDA device lives with the GPU backends
// (src/devices/cuda) and a test can register a device of its own.
//
// Contract between the runtime and a device backend (Backend::device() not null):
// - its kernels take and produce tensors whose data pointers are this device's memory (the
//   runtime allocates it: one arena per device and session, planned by liveness like the
//   host arena);
// - kernels enqueue their work in order on the device (one queue, e.g. one CUDA stream) and
//   may return before it is done; copy_to_device is ordered after work already enqueued,
//   copy_to_host and synchronize() wait for it.
#pragma once

#include <cstddef>
#include <string>

namespace collage {

class Device {
 public:
  virtual ~Device() = default;

  // Short name, e.g. "cuda:0".
  virtual std::string name() const = 0;
  // What measurements on it depend on (model, compute capability, driver): part of the
  // hardware fingerprint of every cost measured with it.
  virtual std::string description() const = 0;

  // Device memory for `bytes` (> 0). Throws Error(kLimit) when the device has not that much.
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* memory) noexcept = 0;

  // `bytes` from host memory to device memory, after the work already enqueued; `host_src`
  // may be overwritten once the call returns.
  virtual void copy_to_device(void* device_dst, const void* host_src, size_t bytes) = 0;
  // `bytes` from device memory to host memory, after the work already enqueued; the bytes
  // are on the host when the call returns.
  virtual void copy_to_host(void* host_dst, const void* device_src, size_t bytes) = 0;
  // Waits until everything enqueued has run; throws Error(kBackend) for a failure it reports
  // (an asynchronous kernel error).
  virtual void synchronize() = 0;
};

}  // namespace collage

// A test-only device whose "device memory" is host memory it hands out itself, and a backend
// whose kernels run there (the reference implementations, on that memory). Not a stand-in for
// CUDA: it lets the runtime's and the search's own device logic (which values live where, where
// copies go, the device arena) be checked on any machine. The device knows every byte it
// handed out, so the tests can tell device memory from host memory; its kernels refuse host
// pointers and its copies refuse the wrong direction, so a runtime that passes the wrong
// tensor fails loudly.
#pragma once

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "collage/backend.h"
#include "collage/device.h"
#include "collage/error.h"
#include "collage/pattern.h"

namespace collage::testing {

class HostMemoryDevice : public Device {
 public:
  std::string name() const override { return "test-device:0"; }
  std::string description() const override { return "test device (host memory)"; }
  void* allocate(size_t bytes) override {
    void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    std::lock_guard<std::mutex> lock(mutex_);
    blocks_[static_cast<std::byte*>(p)] = bytes;
    ++allocations;
    return p;
  }
  void release(void* memory) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    blocks_.erase(static_cast<std::byte*>(memory));
    std::free(memory);
  }
  void copy_to_device(void* dst, const void* src, size_t bytes) override {
    if (!owns(dst, bytes) || owns(src, 1))
      fail(ErrorKind::kInternal, "test device: copy_to_device from device or to host memory");
    std::memcpy(dst, src, bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    ++to_device;
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    if (!owns(src, bytes) || owns(dst, 1))
      fail(ErrorKind::kInternal, "test device: copy_to_host from host or to device memory");
    std::memcpy(dst, src, bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    ++to_host;
  }
  void synchronize() override {}

  // Whether [p, p + bytes) lies in one block this device handed out.
  bool owns(const void* p, size_t bytes) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto b = static_cast<const std::byte*>(p);
    auto it = blocks_.upper_bound(const_cast<std::byte*>(b));
    if (it == blocks_.begin()) return false;
    --it;
    return b >= it->first && b + bytes <= it->first + it->second;
  }
  size_t live_blocks() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return blocks_.size();
  }

  int allocations = 0, to_device = 0, to_host = 0;

 private:
  mutable std::mutex mutex_;
  std::map<std::byte*, size_t> blocks_;
};

// Runs what reference runs, on `device`'s memory; every tensor it gets must be the device's.
class HostMemoryDeviceBackend : public Backend {
 public:
  explicit HostMemoryDeviceBackend(HostMemoryDevice* device, std::string name = "test-device")
      : device_(device), name_(std::move(name)) {}
  std::string name() const override { return name_; }
  std::string version() const override { return "1"; }
  Device* device() const override { return device_; }
  std::vector<PatternEntry> patterns() const override {
    return {{"elementwise", op_in({"Relu", "Add", "Mul", "Sigmoid"}), {}}};
  }
  std::unique_ptr<Kernel> compile(const Graph& subgraph, const CompileOptions&) override {
    struct DeviceKernel : Kernel {
      HostMemoryDevice* device;
      std::unique_ptr<Kernel> inner;
      void run(std::span<const Tensor> in, std::span<const Tensor> out) override {
        for (const Tensor& t : in)
          if (t.defined() && t.nbytes() && !device->owns(t.raw(), t.nbytes()))
            fail(ErrorKind::kInternal, "test device kernel got a host input");
        for (const Tensor& t : out)
          if (t.defined() && t.nbytes() && !device->owns(t.raw(), t.nbytes()))
            fail(ErrorKind::kInternal, "test device kernel got a host output");
        inner->run(in, out);
      }
    };
    auto k = std::make_unique<DeviceKernel>();
    k->device = device_;
    k->inner = BackendRegistry::global().fallback().compile(subgraph, CompileOptions{});
    return k;
  }

 private:
  HostMemoryDevice* device_;
  std::string name_;
};

}  // namespace collage::testing

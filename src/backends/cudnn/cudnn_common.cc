#include "backends/cudnn/cudnn_common.h"

#include <fmt/format.h>

#include <limits>

namespace collage::cudnn_backend {
namespace {

using cuda::CudaDevice;

std::mutex& handle_mutex() {
  static std::mutex m;
  return m;
}

cudnnHandle_t the_handle() {
  // Made on first use (needs the device), never destroyed: kernels may outlive statics.
  static cudnnHandle_t handle = [] {
    cudnnHandle_t h = nullptr;
    check(cudnnCreate(&h), "cudnnCreate");
    return h;
  }();
  return handle;
}

}  // namespace

void check(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS)
    fail(ErrorKind::kBackend, "cudnn: {}: {}", what, cudnnGetErrorString(status));
}

void check_supported(cudnnStatus_t status, const char* what) {
  if (status == CUDNN_STATUS_NOT_SUPPORTED || status == CUDNN_STATUS_BAD_PARAM)
    fail(ErrorKind::kUnsupported, "cudnn: {}: {}", what, cudnnGetErrorString(status));
  check(status, what);
}

HandleLock::HandleLock() : lock_(handle_mutex()), handle_(the_handle()) {
  check(cudnnSetStream(handle_, CudaDevice::get().stream()), "cudnnSetStream");
}

std::vector<int> to_int(const std::vector<int64_t>& dims, const char* what) {
  std::vector<int> out;
  for (int64_t d : dims) {
    if (d < 0 || d > std::numeric_limits<int>::max())
      fail(ErrorKind::kUnsupported, "cudnn: {} {} does not fit an int", what, d);
    out.push_back(static_cast<int>(d));
  }
  return out;
}

TensorDesc::TensorDesc(const std::vector<int>& dims) {
  check(cudnnCreateTensorDescriptor(&desc_), "cudnnCreateTensorDescriptor");
  std::vector<int> strides(dims.size());
  int64_t stride = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = static_cast<int>(stride);
    stride *= dims[i];
  }
  if (stride > std::numeric_limits<int>::max())
    fail(ErrorKind::kUnsupported, "cudnn: a tensor of {} elements is too large", stride);
  check_supported(cudnnSetTensorNdDescriptor(desc_, CUDNN_DATA_FLOAT, static_cast<int>(dims.size()),
                                             dims.data(), strides.data()),
                  "cudnnSetTensorNdDescriptor");
}
TensorDesc::~TensorDesc() {
  cudnnDestroyTensorDescriptor(desc_);
}

FilterDesc::FilterDesc(const std::vector<int>& dims) {
  check(cudnnCreateFilterDescriptor(&desc_), "cudnnCreateFilterDescriptor");
  check_supported(cudnnSetFilterNdDescriptor(desc_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                             static_cast<int>(dims.size()), dims.data()),
                  "cudnnSetFilterNdDescriptor");
}
FilterDesc::~FilterDesc() {
  cudnnDestroyFilterDescriptor(desc_);
}

ConvDesc::ConvDesc(const std::vector<int>& pads, const std::vector<int>& strides,
                   const std::vector<int>& dilations, int groups) {
  check(cudnnCreateConvolutionDescriptor(&desc_), "cudnnCreateConvolutionDescriptor");
  check_supported(cudnnSetConvolutionNdDescriptor(desc_, static_cast<int>(pads.size()), pads.data(),
                                                  strides.data(), dilations.data(),
                                                  CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                  "cudnnSetConvolutionNdDescriptor");
  check_supported(cudnnSetConvolutionGroupCount(desc_, groups), "cudnnSetConvolutionGroupCount");
  // FMA math: plain float32 (no TF32 tensor cores) unless TF32 is allowed.
  check_supported(
      cudnnSetConvolutionMathType(desc_, CudaDevice::tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH),
      "cudnnSetConvolutionMathType");
}
ConvDesc::~ConvDesc() {
  cudnnDestroyConvolutionDescriptor(desc_);
}

PoolDesc::PoolDesc(cudnnPoolingMode_t mode, const std::vector<int>& window,
                   const std::vector<int>& pads, const std::vector<int>& strides) {
  check(cudnnCreatePoolingDescriptor(&desc_), "cudnnCreatePoolingDescriptor");
  check_supported(
      cudnnSetPoolingNdDescriptor(desc_, mode, CUDNN_PROPAGATE_NAN, static_cast<int>(window.size()),
                                  window.data(), pads.data(), strides.data()),
      "cudnnSetPoolingNdDescriptor");
}
PoolDesc::~PoolDesc() {
  cudnnDestroyPoolingDescriptor(desc_);
}

ActivationDesc::ActivationDesc(cudnnActivationMode_t mode) {
  check(cudnnCreateActivationDescriptor(&desc_), "cudnnCreateActivationDescriptor");
  check_supported(cudnnSetActivationDescriptor(desc_, mode, CUDNN_PROPAGATE_NAN, 0.0),
                  "cudnnSetActivationDescriptor");
}
ActivationDesc::~ActivationDesc() {
  cudnnDestroyActivationDescriptor(desc_);
}

DeviceMemory::DeviceMemory(size_t bytes)
    : ptr_(bytes ? CudaDevice::get().allocate(bytes) : nullptr), bytes_(bytes) {}

DeviceMemory::DeviceMemory(const void* host, size_t bytes) : DeviceMemory(bytes) {
  if (bytes) {
    CudaDevice::get().copy_to_device(ptr_, host, bytes);
    CudaDevice::get().synchronize();
  }
}

DeviceMemory::~DeviceMemory() {
  if (ptr_) CudaDevice::get().release(ptr_);
}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& o) noexcept {
  if (this != &o) {
    if (ptr_) CudaDevice::get().release(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
  }
  return *this;
}

std::string library_version() {
  const size_t v = cudnnGetVersion();  // 91900 for 9.19.0
  return fmt::format("{}.{}.{}{}", v / 10000, v % 10000 / 100, v % 100,
                     CudaDevice::tf32() ? "+tf32" : "");
}

}  // namespace collage::cudnn_backend

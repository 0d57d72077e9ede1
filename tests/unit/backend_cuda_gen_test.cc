// cuda-gen: the code generator and the NVRTC cache are tested here on any machine (NVRTC
// needs no GPU: every generated region must compile to a cubin); the kernels' results need a
// device and skip without one.
#include <dlfcn.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include <filesystem>
#include <fstream>

#include "backends/cuda_gen/codegen.h"
#include "backends/cuda_gen/nvrtc_compiler.h"
#include "gpu_test_util.h"
#include "op_test_util.h"

namespace collage {
namespace {

using testing::attr_f;
using testing::attr_i;
using testing::attr_ints;
using testing::GraphBuilder;

// The regions the generator exists for, as exporters write them.
struct Region {
  std::string name;
  Graph graph;
  bool rows;  // whether it needs the row (reduction) kernel
};

Graph gelu_erf(bool small) {
  GraphBuilder b(13);
  ValueId x = b.input("x", DType::kFloat32, {2, small ? 5 : 64, small ? 48 : 3072});
  ValueId d = b.add1("Div", {x, b.constant("sqrt2", Tensor::scalar(1.41421356f))});
  ValueId e = b.add1("Add", {b.add1("Erf", {d}), b.constant("one", Tensor::scalar(1.0f))});
  b.output(b.add1("Mul", {b.add1("Mul", {x, e}), b.constant("half", Tensor::scalar(0.5f))}));
  return b.finish();
}

Graph layer_norm_decomposed(bool small) {
  GraphBuilder b(13);
  const int64_t c = small ? 40 : 768;
  ValueId x = b.input("x", DType::kFloat32, {1, small ? 6 : 128, c});
  ValueId mean = b.add1("ReduceMean", {x}, {{"axes", attr_ints({-1})}});
  ValueId d = b.add1("Sub", {x, mean});
  ValueId var = b.add1("ReduceMean", {b.add1("Pow", {d, b.constant("two", Tensor::scalar(2.0f))})},
                       {{"axes", attr_ints({-1})}});
  ValueId den = b.add1("Sqrt", {b.add1("Add", {var, b.constant("eps", Tensor::scalar(1e-5f))})});
  ValueId y = b.add1("Div", {d, den});
  y = b.add1("Mul", {y, b.random_constant("gamma", {c})});
  b.output(b.add1("Add", {y, b.random_constant("beta", {c})}));
  return b.finish();
}

Graph layer_norm_op(bool small) {
  GraphBuilder b(17);
  const int64_t c = small ? 300 : 768;
  ValueId x = b.input("x", DType::kFloat32, {1, small ? 3 : 197, c});
  b.output(b.add1("LayerNormalization",
                  {x, b.random_constant("scale", {c}), b.random_constant("bias", {c})},
                  {{"epsilon", attr_f(1e-6f)}}));
  return b.finish();
}

Graph attention_softmax(bool small) {
  GraphBuilder b(13);
  const int64_t t = small ? 24 : 128;
  ValueId s = b.input("scores", DType::kFloat32, {1, small ? 2 : 12, t, t});
  ValueId scaled = b.add1("Div", {s, b.constant("scale", Tensor::scalar(8.0f))});
  ValueId masked = b.add1("Add", {scaled, b.input("mask", DType::kFloat32, {1, 1, 1, t})});
  b.output(b.add1("Softmax", {masked}, {{"axis", attr_i(-1)}}));
  return b.finish();
}

Graph causal_softmax(bool small) {
  GraphBuilder b(13);
  const int64_t t = small ? 9 : 64;
  ValueId s = b.input("scores", DType::kFloat32, {1, small ? 2 : 12, t, t});
  Tensor mask(DType::kBool, {1, 1, t, t});
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < t; ++j) mask.data<bool>()[i * t + j] = j <= i;
  ValueId w = b.add1("Where", {b.constant("causal", mask), s,
                               b.constant("min", Tensor::scalar(-3.4028234663852886e38f))});
  b.output(b.add1("Softmax", {w}, {{"axis", attr_i(-1)}}));
  return b.finish();
}

Graph bias_relu_two_outputs() {
  GraphBuilder b(13);
  ValueId x = b.input("x", DType::kFloat32, {2, 3, 4, 5});
  ValueId a = b.add1("Add", {x, b.random_constant("bias", {3, 1, 1})});
  ValueId s = b.add1("Sigmoid", {a});
  b.output(s);
  b.output(b.add1("Mul", {b.add1("Clip", {a, b.constant("lo", Tensor::scalar(-0.5f)),
                                          b.constant("hi", Tensor::scalar(0.5f))}),
                          s}));
  return b.finish();
}

Graph row_max_and_sum() {
  GraphBuilder b(13);
  ValueId x = b.input("x", DType::kFloat32, {7, 33});
  ValueId m = b.add1("ReduceMax", {x}, {{"axes", attr_ints({1})}});
  ValueId l = b.add1("LeakyRelu", {b.add1("Sub", {x, m})}, {{"alpha", attr_f(0.1f)}});
  b.output(b.add1("ReduceSum", {l, b.constant("axes", Tensor::from_vector<int64_t>({1}, {-1}))}));
  b.output(l);
  return b.finish();
}

// `small`: sizes the host emulation runs in a moment (every CUDA thread is an OS thread).
std::vector<Region> regions(bool small = false) {
  std::vector<Region> r;
  r.push_back({"gelu (erf)", gelu_erf(small), false});
  r.push_back({"layer norm, decomposed", layer_norm_decomposed(small), true});
  r.push_back({"LayerNormalization", layer_norm_op(small), true});
  r.push_back({"attention scale + mask + softmax", attention_softmax(small), true});
  r.push_back({"causal Where + softmax", causal_softmax(small), true});
  r.push_back({"broadcast bias, two outputs", bias_relu_two_outputs(), false});
  r.push_back({"row max, sum, two outputs", row_max_and_sum(), true});
  return r;
}

TEST(CudaGen, EveryRegionCompilesWithNvrtc) {
  for (const Region& region : regions()) {
    SCOPED_TRACE(region.name);
    cuda_gen::GeneratedKernel k = cuda_gen::generate(region.graph);
    EXPECT_EQ(k.row_kernel, region.rows);
    EXPECT_NE(k.source.find(cuda_gen::kEntry), std::string::npos);
    // One parameter per input and output at least (constants may add more).
    EXPECT_GE(k.params.size(), region.graph.inputs.size() + region.graph.outputs.size());
    for (int arch : {80, 90}) {
      std::shared_ptr<const std::string> cubin;
      ASSERT_NO_THROW(cubin = cuda_gen::compile_cubin(k.source, arch)) << k.source;
      ASSERT_GT(cubin->size(), 4u);
      EXPECT_EQ(cubin->compare(0, 4,
                               "\x7f"
                               "ELF"),
                0)
          << "not a cubin";
    }
  }
}

TEST(CudaGen, BrokenSourceReportsNvrtcsLog) {
  try {
    cuda_gen::compile_cubin("extern \"C\" __global__ void collage_gen() { undefined_thing(); }",
                            90);
    FAIL() << "compiled";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBackend);
    EXPECT_NE(std::string(e.what()).find("undefined_thing"), std::string::npos) << e.what();
  }
}

TEST(CudaGen, RefusesWhatItsKernelModelCannotRun) {
  auto expect_refused = [](const Graph& g, const std::string& needle) {
    try {
      cuda_gen::generate(g);
      ADD_FAILURE() << "generated: " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  {
    GraphBuilder b(13);
    ValueId x = b.input("x", DType::kFloat32, {4, 8});
    b.output(b.add1("ReduceSum", {x, b.constant("axes", Tensor::from_vector<int64_t>({1}, {0}))}));
    expect_refused(b.finish(), "only the last");
  }
  {
    GraphBuilder b(13);
    ValueId x = b.input("x", DType::kFloat32, {4, 8});
    b.output(b.add1("ReduceMean", {x}, {{"axes", attr_ints({1})}, {"keepdims", attr_i(0)}}));
    expect_refused(b.finish(), "keepdims");
  }
  {
    GraphBuilder b(13);
    ValueId x = b.input("x", DType::kInt64, {4});
    b.output(b.add1("Add", {x, x}));
    expect_refused(b.finish(), "int64");
  }
  {
    GraphBuilder b(13);
    ValueId x = b.input("x", DType::kFloat32, {4, 8});
    b.output(b.add1("MatMul", {x, b.random_constant("w", {8, 2})}));
    expect_refused(b.finish(), "MatMul");
  }
  {
    // Rows of 8 read together with a reduction over rows of 5: no one row length.
    GraphBuilder b(13);
    ValueId x = b.input("x", DType::kFloat32, {8, 1});
    ValueId y = b.input("y", DType::kFloat32, {1, 5});
    ValueId s = b.add1("Add", {x, y});
    b.output(
        b.add1("ReduceSum", {b.input("z", DType::kFloat32, {8, 3})}, {{"axes", attr_ints({-1})}}));
    b.output(s);
    expect_refused(b.finish(), "does not broadcast");
  }
}

TEST(CudaGen, CacheServesTheSecondCompileFromDisk) {
  namespace fs = std::filesystem;
  testing::TempCacheDir cache_dir("cuda-gen-test");
  const fs::path& dir = cache_dir.path();
  // A shape no other test uses: new to this process.
  GraphBuilder b(13);
  ValueId x = b.input("x", DType::kFloat32, {3, 1777});
  b.output(b.add1("Tanh", {b.add1("Mul", {x, b.constant("k", Tensor::scalar(3.0f))})}));
  const std::string source = cuda_gen::generate(b.finish()).source;
  auto cubins = [&] {
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir / "cuda-gen"))
      n += e.path().extension() == ".cubin";
    return n;
  };
  const cuda_gen::CompileStats before = cuda_gen::compile_stats();
  auto first = cuda_gen::compile_cubin(source, 90);
  EXPECT_EQ(cuda_gen::compile_stats().compiles, before.compiles + 1);
  EXPECT_EQ(cubins(), 1);
  EXPECT_EQ(cuda_gen::cache_dir(), (dir / "cuda-gen").string());
  // From memory.
  cuda_gen::compile_cubin(source, 90);
  EXPECT_EQ(cuda_gen::compile_stats().memory_hits, before.memory_hits + 1);
  // From disk once the process forgets it: the same bytes, no compile.
  cuda_gen::clear_memory_cache();
  auto second = cuda_gen::compile_cubin(source, 90);
  EXPECT_EQ(cuda_gen::compile_stats().disk_hits, before.disk_hits + 1);
  EXPECT_EQ(cuda_gen::compile_stats().compiles, before.compiles + 1);
  EXPECT_EQ(*first, *second);
  // Another architecture is another kernel.
  cuda_gen::compile_cubin(source, 80);
  EXPECT_EQ(cubins(), 2);
  // A damaged file is rebuilt, not loaded.
  for (const auto& e : fs::directory_iterator(dir / "cuda-gen"))
    if (e.path().extension() == ".cubin") std::ofstream(e.path()) << "garbage";
  cuda_gen::clear_memory_cache();
  auto rebuilt = cuda_gen::compile_cubin(source, 90);
  EXPECT_EQ(*rebuilt, *first);
  EXPECT_EQ(cuda_gen::compile_stats().compiles, before.compiles + 3);
}

TEST(CudaGen, ProposesRegionsAndLoneOps) {
  Backend& gen = BackendRegistry::global().get("cuda-gen");
  EXPECT_NE(gen.device(), nullptr);
  const Graph g = layer_norm_decomposed(false);
  bool whole = false, lone_sqrt = false;
  for (const Match& m : find_matches(g, gen)) {
    whole = whole || m.nodes.size() == g.num_nodes();
    lone_sqrt = lone_sqrt || (m.nodes.size() == 1 && g.node(m.nodes[0]).op_type == "Sqrt");
  }
  EXPECT_TRUE(whole);
  EXPECT_TRUE(lone_sqrt);
}

// The generated kernels' arithmetic, without a GPU: the source is compiled by the host's C++
// compiler with a few lines standing in for CUDA's built-ins (threadIdx, blockIdx,
// __syncthreads as a barrier across one OS thread per CUDA thread, __shared__ as storage the
// block's threads share), and run block after block. Not a model of the GPU: it executes the
// generator's own index arithmetic, reductions and expressions, which is what these tests are
// for. The device tests below run the same regions through NVRTC on a GPU.
constexpr const char* kHostShim = R"(#include <math.h>
#include <barrier>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>
struct CollageDim3 { unsigned x = 0, y = 0, z = 0; };
static thread_local CollageDim3 threadIdx, blockIdx;
static CollageDim3 blockDim, gridDim;
static std::barrier<>* collage_barrier;
#define __global__
#define __launch_bounds__(n)
#define __restrict__ __restrict
#define __shared__ static
static inline void __syncthreads() { collage_barrier->arrive_and_wait(); }
static inline float __int_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
)";

// One launcher per kernel; COLLAGE_ID names them apart.
constexpr const char* kHostLauncher = R"(
extern "C" void COLLAGE_LAUNCH(void** args, unsigned grid, unsigned block) {
  gridDim.x = grid;
  blockDim.x = block;
  std::barrier<> sync(block);
  collage_barrier = &sync;
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < block; ++t)
    threads.emplace_back([&, t] {
      threadIdx.x = t;
      for (unsigned b = 0; b < grid; ++b) {
        blockIdx.x = b;
        collage_call(&COLLAGE_KERNEL, args, std::make_index_sequence<COLLAGE_ARITY>());
        sync.arrive_and_wait();
      }
    });
  for (auto& t : threads) t.join();
}
)";

constexpr const char* kHostCall = R"(
template <class... P, size_t... I>
static void collage_call(void (*f)(P...), void** a, std::index_sequence<I...>) {
  f(static_cast<P>(a[I])...);
}
)";

// Compiles every kernel into one host library (one compiler run) and runs kernel i on its
// region's inputs; returns each region's outputs.
std::vector<std::vector<Tensor>> run_on_host(const std::vector<Region>& regions,
                                             const std::vector<cuda_gen::GeneratedKernel>& ks,
                                             const std::vector<std::vector<Tensor>>& inputs) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / fmt::format("collage-cuda-gen-host-{}", getpid());
  fs::create_directories(dir);
  {
    std::ofstream src(dir / "k.cc");
    src << kHostShim << kHostCall;
    for (size_t i = 0; i < ks.size(); ++i) {
      std::string source = ks[i].source;
      const std::string entry = cuda_gen::kEntry;
      source.replace(source.find(entry), entry.size(), fmt::format("collage_gen_{}", i));
      src << source
          << fmt::format(
                 "#define COLLAGE_ARITY {}\n#define COLLAGE_KERNEL collage_gen_{}\n"
                 "#define COLLAGE_LAUNCH collage_launch_{}\n",
                 ks[i].params.size(), i, i)
          << kHostLauncher
          << "#undef COLLAGE_ARITY\n#undef COLLAGE_KERNEL\n#undef COLLAGE_LAUNCH\n";
    }
  }
  const std::string cmd = fmt::format("c++ -O1 -std=c++20 -shared -fPIC -pthread -o {} {} 2>&1",
                                      (dir / "k.so").string(), (dir / "k.cc").string());
  std::vector<std::vector<Tensor>> results;
  if (std::system(cmd.c_str()) != 0) {
    ADD_FAILURE() << "host compile failed: " << cmd;
    return results;
  }
  void* lib = dlopen((dir / "k.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  EXPECT_NE(lib, nullptr) << dlerror();
  if (!lib) return results;
  for (size_t i = 0; i < ks.size(); ++i) {
    const Graph& g = regions[i].graph;
    using Launch = void (*)(void**, unsigned, unsigned);
    auto launch = reinterpret_cast<Launch>(dlsym(lib, fmt::format("collage_launch_{}", i).c_str()));
    std::vector<Tensor> outputs;
    for (ValueId v : g.outputs) outputs.emplace_back(g.value(v).dtype, g.value(v).shape);
    std::vector<void*> args;
    for (const cuda_gen::KernelParam& p : ks[i].params) {
      switch (p.kind) {
        case cuda_gen::KernelParam::Kind::kInput:
          args.push_back(inputs[i][p.index].raw());
          break;
        case cuda_gen::KernelParam::Kind::kConstant:
          args.push_back(ks[i].constants[p.index].raw());
          break;
        case cuda_gen::KernelParam::Kind::kOutput:
          args.push_back(outputs[p.index].raw());
          break;
      }
    }
    // A few blocks: the grid-stride loops must cover everything whatever the grid.
    launch(args.data(), 3, static_cast<unsigned>(ks[i].block));
    results.push_back(std::move(outputs));
  }
  dlclose(lib);
  fs::remove_all(dir);
  return results;
}

TEST(CudaGen, GeneratedKernelsComputeLikeReferenceOnTheHost) {
  const std::vector<Region> small = regions(true);
  std::vector<cuda_gen::GeneratedKernel> kernels;
  std::vector<std::vector<Tensor>> inputs;
  for (const Region& region : small) {
    kernels.push_back(cuda_gen::generate(region.graph));
    inputs.push_back(random_inputs(region.graph, 11));
  }
  std::vector<std::vector<Tensor>> got = run_on_host(small, kernels, inputs);
  ASSERT_EQ(got.size(), small.size());
  for (size_t i = 0; i < small.size(); ++i) {
    SCOPED_TRACE(small[i].name);
    Session reference(small[i].graph, SessionOptions{});
    EXPECT_TRUE(testing::outputs_match(got[i], reference.run(inputs[i]), Tolerance{1e-4, 1e-5}));
  }
}

// On a device: every region computes what reference does.
TEST(CudaGenDevice, RegionsLikeReference) {
  COLLAGE_SKIP_WITHOUT_GPU("cuda-gen");
  for (const Region& region : regions())
    testing::expect_gpu_like_reference("cuda-gen", region.graph, region.name);
}

}  // namespace
}  // namespace collage

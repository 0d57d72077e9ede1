#include "collage/graph.h"

#include <gtest/gtest.h>

namespace collage {
namespace {

// a -> Relu -> b -> Relu -> c, built out of order to exercise the sort.
Graph two_relus_reversed() {
  Graph g;
  ValueId a = g.add_value("a", DType::kFloat32, {2}, true);
  ValueId b = g.add_value("b");
  ValueId c = g.add_value("c");
  Node second{"second", "Relu", "", {b}, {c}, {}};
  Node first{"first", "Relu", "", {a}, {b}, {}};
  g.add_node(second);
  g.add_node(first);
  g.inputs = {a};
  g.outputs = {c};
  return g;
}

TEST(Graph, SortsTopologically) {
  Graph g = two_relus_reversed();
  g.sort_topologically();
  EXPECT_EQ(g.node(0).name, "first");
  EXPECT_EQ(g.node(1).name, "second");
  EXPECT_EQ(g.value(*g.find_value("b")).producer, 0);
}

TEST(Graph, DetectsCycle) {
  Graph g;
  ValueId a = g.add_value("a");
  ValueId b = g.add_value("b");
  g.add_node(Node{"x", "Relu", "", {a}, {b}, {}});
  g.add_node(Node{"y", "Relu", "", {b}, {a}, {}});
  try {
    g.sort_topologically();
    FAIL() << "cycle not detected";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidModel);
    EXPECT_NE(std::string(e.what()).find("cycle"), std::string::npos);
  }
}

TEST(Graph, PruneRenumbersAndDropsUnusedValues) {
  Graph g = two_relus_reversed();
  g.sort_topologically();
  g.outputs = {*g.find_value("b")};
  g.prune({false, true});
  ASSERT_EQ(g.num_nodes(), 1u);
  EXPECT_EQ(g.num_values(), 2u);
  EXPECT_FALSE(g.find_value("c").has_value());
  EXPECT_EQ(g.value(g.outputs[0]).name, "b");
  EXPECT_EQ(g.value(g.outputs[0]).producer, 0);
}

TEST(Tensor, NumelOverflowIsALimitError) {
  try {
    shape_numel({int64_t{1} << 40, int64_t{1} << 40});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kLimit);
  }
}

TEST(Tensor, FromVectorAndReshape) {
  Tensor t = Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.nbytes(), 24u);
  Tensor r = t.reshaped({3, 2});
  EXPECT_EQ(r.data<float>(), t.data<float>());
  EXPECT_EQ(r.get_as_int(5), 6);
  EXPECT_THROW(t.reshaped({4}), Error);
  EXPECT_THROW(t.data<int64_t>(), Error);
}

// Owning storage is 64-byte aligned whatever its size (what oneDNN's non-temporal stores into
// a kernel's output need; OnednnResample.LargeUpsamplingIntoACallersTensor is the crash), and
// zero-filled; clones too.
TEST(Tensor, OwningStorageIs64ByteAlignedAndZeroed) {
  for (int64_t n : {0, 1, 3, 17, 1000, 1 << 20}) {
    Tensor t(DType::kFloat32, {n});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u) << n;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.clone().raw()) % 64, 0u) << n;
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(t.data<float>()[i], 0.0f) << n;
  }
  Tensor bytes(DType::kUInt8, {5});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(bytes.raw()) % 64, 0u);
}

}  // namespace
}  // namespace collage

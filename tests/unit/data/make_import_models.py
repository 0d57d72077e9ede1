#!/usr/bin/python3
"""Regenerates the tiny ONNX models of import_test.cc / passes_test.cc.

Run with Debian's python3-onnx: /usr/bin/python3 tests/unit/data/make_import_models.py
Ops in the "collage.test" domain are registered by the tests themselves, so these models
do not depend on which built-in ops exist.
"""
import os

import numpy as np
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
TEST_DOMAIN = "collage.test"


def opsets(version=13):
    return [helper.make_opsetid("", version), helper.make_opsetid(TEST_DOMAIN, 1)]


def save(model, name):
    data = model.SerializeToString()
    assert len(data) < 10 * 1024, name
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)
    return data


def vi(name, dims, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, dims)


def model(nodes, inputs, outputs, inits=(), version=13, value_info=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits), value_info=list(value_info))
    return helper.make_model(graph, opset_imports=opsets(version), producer_name="collage-tests")


def add_one(x, y, name=""):
    return helper.make_node("AddOne", [x], [y], name=name, domain=TEST_DOMAIN)


def external(name, dims, location, offset=None, length=None):
    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.FLOAT
    t.dims.extend(dims)
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            e = t.external_data.add()
            e.key = key
            e.value = str(value)
    return t


def main():
    # x + w, w in float_data; the second output is the initializer itself (a constant output).
    w = helper.make_tensor("w", TensorProto.FLOAT, [2, 3], [1, 2, 3, 4, 5, 6])
    add_w = helper.make_node("AddW", ["x", "w"], ["y"], domain=TEST_DOMAIN)
    save(model([add_w], [vi("x", [2, 3])], [vi("y", [2, 3]), vi("w", [2, 3])], [w]), "add_w.onnx")

    # A model whose graph is cut in half: the length prefix of the graph overruns the bytes.
    big = numpy_helper.from_array(np.arange(256, dtype=np.float32).reshape(16, 16), "w")
    data = model([helper.make_node("AddW", ["x", "w"], ["y"], domain=TEST_DOMAIN)],
                 [vi("x", [16, 16])], [vi("y", [16, 16])], [big]).SerializeToString()
    with open(os.path.join(HERE, "truncated.onnx"), "wb") as f:
        f.write(data[: len(data) // 2])

    def ext_model(tensor, name):
        n = helper.make_node("AddW", ["x", "w"], ["y"], domain=TEST_DOMAIN)
        save(model([n], [vi("x", [2, 2])], [vi("y", [2, 2])], [tensor]), name)

    ext_model(external("w", [2, 2], "../escape.bin"), "external_escape.onnx")
    ext_model(external("w", [2, 2], "/etc/passwd"), "external_absolute.onnx")
    ext_model(external("w", [2, 2], "missing.bin"), "external_missing.onnx")
    ext_model(external("w", [2, 2], "external_ok.bin", offset=8, length=16), "external_ok.onnx")
    ext_model(external("w", [2, 2], "external_ok.bin", offset=16), "external_short.onnx")
    with open(os.path.join(HERE, "external_ok.bin"), "wb") as f:
        f.write(np.arange(6, dtype=np.float32).tobytes())  # w = [2, 3, 4, 5] at offset 8

    bad = helper.make_tensor("w", TensorProto.FLOAT, [2, 3], [1, 2, 3, 4, 5, 6])
    del bad.float_data[-1]
    ext_model(bad, "init_size_mismatch.onnx")
    neg = helper.make_tensor("w", TensorProto.FLOAT, [2, 2], [1, 2, 3, 4])
    neg.dims[0] = -2
    ext_model(neg, "init_negative_dim.onnx")

    save(model([add_one("x", "y")], [vi("x", [1 << 20, 1 << 20])], [vi("y", [1 << 20, 1 << 20])]),
         "huge_input.onnx")
    huge = TensorProto()
    huge.name, huge.data_type = "w", TensorProto.FLOAT
    huge.dims.extend([1 << 30, 1 << 10])
    ext_model(huge, "huge_initializer.onnx")

    foo = helper.make_node("Foo", ["x"], ["y"], domain="com.example")
    m = model([foo], [vi("x", [2])], [vi("y", [2])])
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    save(m, "unknown_op.onnx")

    save(model([add_one("x", "y")], [vi("x", ["batch", 3])], [vi("y", ["batch", 3])]),
         "symbolic_dim.onnx")

    # y = AddOne(x) is live; the Neg branch and the unused AddOne feed nothing.
    nodes = [add_one("x", "y", "live"), add_one("x", "t", "dead1"),
             helper.make_node("NegT", ["t"], ["u"], name="dead2", domain=TEST_DOMAIN)]
    save(model(nodes, [vi("x", [4])], [vi("y", [4])]), "dead_code.onnx")

    # Constants all the way: c = AddOne(AddOne(k)) folds, the output is a constant.
    k = helper.make_tensor("k", TensorProto.FLOAT, [3], [1, 2, 3])
    nodes = [add_one("k", "k1"), add_one("k1", "c"), helper.make_node(
        "AddW", ["x", "c"], ["y"], domain=TEST_DOMAIN)]
    save(model(nodes, [vi("x", [3])], [vi("y", [3]), vi("c", [3])], [k]), "fold_chain.onnx")

    # The exporters' dynamic reshape: y = Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])).
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
             numpy_helper.from_array(np.array([0], dtype=np.int64), "axes"),
             numpy_helper.from_array(np.array([-1], dtype=np.int64), "minus1")]
    save(model(nodes, [vi("x", [2, 3, 4])], [vi("y", [2, 12])], inits), "shape_chain.onnx")

    # Declared output shape that contradicts AddOne's (same shape as input).
    save(model([add_one("x", "y")], [vi("x", [2, 3])], [vi("y", [3, 2])]), "wrong_declared.onnx")

    then_g = helper.make_graph([helper.make_node("Identity", ["x"], ["a"])], "t", [], [vi("a", [2])])
    iff = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=then_g)
    save(model([iff], [vi("c", [], TensorProto.BOOL), vi("x", [2])], [vi("y", [2])]),
         "if_graph.onnx")

    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [2])
    save(model([helper.make_node("SequenceLength", ["s"], ["y"])], [seq],
               [vi("y", [], TensorProto.INT64)]), "sequence_input.onnx")

    save(model([add_one("x", "y")], [vi("x", [2])], [vi("y", [2])], version=23),
         "opset_too_new.onnx")

    # Graph-structure errors (the ONNX checker and the importer both guard against them).
    save(model([add_one("nope", "y")], [vi("x", [2])], [vi("y", [2])]), "dangling_input.onnx")
    save(model([add_one("x", "y", "a"), add_one("x", "y", "b")], [vi("x", [2])], [vi("y", [2])]),
         "duplicate_output.onnx")
    save(model([add_one("x", "y", "a")], [vi("x", [2])], [vi("z", [2])]), "missing_output.onnx")

    # TensorProto files with typed fields instead of raw_data (the test data uses both).
    def save_tensor(t, name):
        with open(os.path.join(HERE, name), "wb") as f:
            f.write(t.SerializeToString())

    save_tensor(helper.make_tensor("i", TensorProto.INT32, [3], [7, -8, 9]), "typed_int32.pb")
    save_tensor(helper.make_tensor("b", TensorProto.BOOL, [2], [True, False]), "typed_bool.pb")
    save_tensor(helper.make_tensor("l", TensorProto.INT64, [2], [1 << 40, -3]), "typed_int64.pb")
    save_tensor(helper.make_tensor("d", TensorProto.DOUBLE, [1], [0.25]), "typed_double.pb")
    short = helper.make_tensor("s", TensorProto.FLOAT, [4], [1, 2, 3, 4])
    del short.float_data[-1]
    save_tensor(short, "typed_short.pb")
    save_tensor(helper.make_tensor("s", TensorProto.STRING, [1], [b"hi"]), "string.pb")


if __name__ == "__main__":
    main()

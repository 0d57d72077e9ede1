# RNN, GRU and LSTM on the reference backend against a NumPy transcription of the ONNX
# operators' equations (written from the spec, independently of src/ops/nn_recurrent.cc):
# every attribute the conformance tests leave out (clip, other activation functions with their
# alpha/beta, sequence_lens, layout 1, reverse, input_forget, linear_before_reset, peepholes,
# initial states), random shapes. ONNX 1.12 (Debian's) has no reference evaluator to ask.
# Also: bad attributes and lengths are errors naming the node, never a crash.
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import collage

# The functions a cell may use: (function, takes alpha, takes beta, default alpha, beta).
FUNCTIONS = {
    "Relu": (lambda x, a, b: np.maximum(x, 0), False, False, 0, 0),
    "Tanh": (lambda x, a, b: np.tanh(x), False, False, 0, 0),
    "Sigmoid": (lambda x, a, b: 1 / (1 + np.exp(-x)), False, False, 0, 0),
    "Affine": (lambda x, a, b: a * x + b, True, True, 1.0, 0.0),
    "LeakyRelu": (lambda x, a, b: np.where(x >= 0, x, a * x), True, False, 0.01, 0),
    "ThresholdedRelu": (lambda x, a, b: np.where(x > a, x, 0), True, False, 1.0, 0),
    "ScaledTanh": (lambda x, a, b: a * np.tanh(b * x), True, True, 1.0, 1.0),
    "HardSigmoid": (lambda x, a, b: np.clip(a * x + b, 0, 1), True, True, 0.2, 0.5),
    "Elu": (lambda x, a, b: np.where(x >= 0, x, a * (np.exp(x) - 1)), True, False, 1.0, 0),
    "Softsign": (lambda x, a, b: x / (1 + np.abs(x)), False, False, 0, 0),
    "Softplus": (lambda x, a, b: np.log1p(np.exp(x)), False, False, 0, 0),
}
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
DEFAULTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}


def resolve(names, alphas, betas, clip):
    """The cell functions, alpha and beta consumed in order by those that take them (as ONNX
    Runtime reads the lists), each applied to its input clipped to [-clip, clip]."""
    out, ai, bi = [], 0, 0
    for name in names:
        f, takes_a, takes_b, a, b = FUNCTIONS[name]
        if takes_a and ai < len(alphas):
            a, ai = alphas[ai], ai + 1
        if takes_b and bi < len(betas):
            b, bi = betas[bi], bi + 1
        lo = -clip if clip else -np.inf
        hi = clip if clip else np.inf
        out.append(lambda x, f=f, a=a, b=b: f(np.clip(x, lo, hi), a, b))
    return out


def expected(cell, c, X, W, R, B, lens, h0, c0, P):
    """Y, Y_h (and Y_c) of the ONNX operator, in float64."""
    H, D, G = c["hidden"], 2 if c["direction"] == "bidirectional" else 1, GATES[cell]
    if c["layout"]:
        X = X.transpose(1, 0, 2)
        h0 = None if h0 is None else h0.transpose(1, 0, 2)
        c0 = None if c0 is None else c0.transpose(1, 0, 2)
    T, N = X.shape[0], X.shape[1]
    names = c["activations"] or DEFAULTS[cell] * D
    funcs = resolve(names, c["alphas"], c["betas"], c["clip"])
    k = len(DEFAULTS[cell])
    Y, Yh, Yc = np.zeros((T, D, N, H)), np.zeros((D, N, H)), np.zeros((D, N, H))
    for d in range(D):
        f = funcs[d * k:(d + 1) * k]
        Wb = B[d, :G * H] if B is not None else np.zeros(G * H)
        Rb = B[d, G * H:] if B is not None else np.zeros(G * H)
        backwards = c["direction"] == "reverse" or d == 1
        for n in range(N):
            length = T if lens is None else lens[n]
            h = h0[d, n].astype(np.float64) if h0 is not None else np.zeros(H)
            cs = c0[d, n].astype(np.float64) if c0 is not None else np.zeros(H)
            for t in (range(length - 1, -1, -1) if backwards else range(length)):
                gx = W[d] @ X[t, n] + Wb
                gh = R[d] @ h + Rb
                if cell == "RNN":
                    h = f[0](gx + gh)
                elif cell == "GRU":
                    z = f[0](gx[:H] + gh[:H])
                    r = f[0](gx[H:2 * H] + gh[H:2 * H])
                    if c["linear_before_reset"]:
                        cand = f[1](gx[2 * H:] + r * gh[2 * H:])
                    else:
                        cand = f[1](gx[2 * H:] + R[d][2 * H:] @ (r * h) + Rb[2 * H:])
                    h = (1 - z) * cand + z * h
                else:
                    pi, po, pf = (0, 0, 0) if P is None else (P[d, :H], P[d, H:2 * H], P[d, 2 * H:])
                    pre = gx + gh  # gates i, o, f, c
                    i = f[0](pre[:H] + pi * cs)
                    fg = 1 - i if c["input_forget"] else f[0](pre[2 * H:3 * H] + pf * cs)
                    cs = fg * cs + i * f[1](pre[3 * H:])
                    o = f[0](pre[H:2 * H] + po * cs)
                    h = o * f[2](cs)
                Y[t, d, n] = h
            Yh[d, n], Yc[d, n] = h, cs
    if c["layout"]:
        return Y.transpose(2, 0, 1, 3), Yh.transpose(1, 0, 2), Yc.transpose(1, 0, 2)
    return Y, Yh, Yc


def random_case(rng, cell):
    c = {"direction": rng.choice(["forward", "reverse", "bidirectional"]),
         "seq": int(rng.integers(1, 7)), "batch": int(rng.integers(1, 4)),
         "input": int(rng.integers(1, 6)), "hidden": int(rng.integers(1, 7)),
         "layout": int(rng.integers(0, 2)), "clip": float(rng.choice([0, 0.6])),
         "bias": bool(rng.integers(0, 2)), "states": bool(rng.integers(0, 2)),
         "lens": bool(rng.integers(0, 2)), "alphas": [], "betas": [],
         "linear_before_reset": int(rng.integers(0, 2)) if cell == "GRU" else 0,
         "input_forget": int(rng.integers(0, 2)) if cell == "LSTM" else 0,
         "peephole": cell == "LSTM" and bool(rng.integers(0, 2)), "activations": []}
    if rng.integers(0, 2):
        D = 2 if c["direction"] == "bidirectional" else 1
        c["activations"] = [str(rng.choice(list(FUNCTIONS))) for _ in
                            range(len(DEFAULTS[cell]) * D)]
        c["alphas"] = [float(a) for a in rng.uniform(0.1, 1.5, int(rng.integers(0, 4)))]
        c["betas"] = [float(b) for b in rng.uniform(-0.5, 0.9, int(rng.integers(0, 3)))]
    return c


def build(cell, c, rng, path):
    """The model (weights as initializers), its feeds, and the arrays expected() reads."""
    D, G, H = 2 if c["direction"] == "bidirectional" else 1, GATES[cell], c["hidden"]
    T, N, I = c["seq"], c["batch"], c["input"]
    x_shape = [N, T, I] if c["layout"] else [T, N, I]
    s_shape = [N, D, H] if c["layout"] else [D, N, H]
    f32 = lambda *s: rng.uniform(-0.8, 0.8, s).astype(np.float32)  # noqa: E731
    arrays = {"X": f32(*x_shape), "W": f32(D, G * H, I), "R": f32(D, G * H, H),
              "B": f32(D, 2 * G * H) if c["bias"] else None,
              "lens": rng.integers(1, T + 1, N).astype(np.int32) if c["lens"] else None,
              "h0": f32(*s_shape) if c["states"] else None,
              "c0": f32(*s_shape) if c["states"] and cell == "LSTM" else None,
              "P": f32(D, 3 * H) if c["peephole"] else None}
    names = ["X", "W", "R", "B", "lens", "h0", "c0", "P"][:8 if cell == "LSTM" else 6]
    inputs = [n if arrays[n] is not None else "" for n in names]
    while inputs and not inputs[-1]:
        inputs.pop()
    feeds = {n: arrays[n] for n in ("X", "h0", "c0") if arrays[n] is not None}
    inits = [numpy_helper.from_array(arrays[n], n) for n in ("W", "R", "B", "lens", "P")
             if arrays[n] is not None]
    outputs = ["Y", "Y_h"] + (["Y_c"] if cell == "LSTM" else [])
    attrs = {"hidden_size": H, "direction": c["direction"], "layout": c["layout"]}
    for key in ("activations", "alphas", "betas"):
        if c[key]:
            attrs[{"alphas": "activation_alpha", "betas": "activation_beta"}.get(key, key)] = c[key]
    if c["clip"]:
        attrs["clip"] = c["clip"]
    if cell == "GRU":
        attrs["linear_before_reset"] = c["linear_before_reset"]
    if cell == "LSTM":
        attrs["input_forget"] = c["input_forget"]
    node = helper.make_node(cell, inputs, outputs, name="cell", **attrs)
    graph = helper.make_graph(
        [node], "recurrent",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(a.shape))
         for n, a in feeds.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n, shape in
         zip(outputs, [[N, T, D, H] if c["layout"] else [T, D, N, H], s_shape, s_shape])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), path)
    return feeds, arrays


@pytest.mark.parametrize("cell", ["RNN", "GRU", "LSTM"])
def test_every_attribute_like_the_equations(cell, workdir):
    rng = np.random.default_rng({"RNN": 1, "GRU": 2, "LSTM": 3}[cell])
    nonzero = 0
    for k in range(12):
        c = random_case(rng, cell)
        path = workdir / f"{cell}-{k}.onnx"
        feeds, a = build(cell, c, rng, path)
        sess = collage.InferenceSession(path, backend="reference")
        got = sess.run(None, feeds)
        want = expected(cell, c, a["X"], a["W"], a["R"], a["B"], a["lens"], a["h0"], a["c0"],
                        a["P"])
        for g, w, name in zip(got, want, ["Y", "Y_h", "Y_c"]):
            assert g.shape == w.shape, (c, name)
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"{name}: {c}")
        nonzero += np.abs(got[0]).sum() > 0
    # Some functions zero a whole case (a ThresholdedRelu gate below its threshold): most not.
    assert nonzero >= 9, nonzero


def test_bad_attributes_and_lengths_are_errors_naming_the_node(workdir):
    rng = np.random.default_rng(5)
    c = random_case(rng, "LSTM") | {"direction": "forward", "lens": True, "layout": 0,
                                    "activations": []}
    path = workdir / "lstm-lens.onnx"
    feeds, a = build("LSTM", c, rng, path)
    model = onnx.load(path)
    (lens,) = [t for t in model.graph.initializer if t.name == "lens"]
    lens.CopyFrom(numpy_helper.from_array(np.full(c["batch"], c["seq"] + 1, np.int32), "lens"))
    onnx.save(model, path)
    with pytest.raises(collage.InvalidArgumentError, match=r"'cell' \(LSTM\).*sequence_lens"):
        collage.InferenceSession(path, backend="reference").run(None, feeds)
    for attribute, value, message in [("direction", "sideways", "direction"),
                                      ("hidden_size", 0, "hidden_size must be positive"),
                                      ("activations", ["Tanh"], "activations lists 1"),
                                      ("activations", ["Sigmoid", "Swish", "Tanh"], "Swish")]:
        bad = onnx.load(path)
        node = bad.graph.node[0]
        kept = [x for x in node.attribute if x.name != attribute]
        del node.attribute[:]
        node.attribute.extend(kept + [helper.make_attribute(attribute, value)])
        bad_path = workdir / f"lstm-bad-{attribute}.onnx"
        onnx.save(bad, bad_path)
        with pytest.raises(collage.InvalidModelError, match=f"'cell'.*{message}"):
            collage.InferenceSession(bad_path, backend="reference")

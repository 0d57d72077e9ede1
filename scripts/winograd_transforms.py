#!/usr/bin/env python3
"""Prints the 1-D Winograd transforms F(m, r) that src/backends/onednn/winograd_conv.cc
spells out, derived by Toom-Cook with sympy (exact rationals), and checks them in float32.

For n = m + r - 1 points (n - 1 finite ones and infinity), the correlation of an n-long input
d with an r-tap filter g is y = A^T [(G g) * (B^T d)]: A^T (m x n) evaluates the output
polynomial, G (n x r) the filter at the points (over the Lagrange denominators), B^T the
transposed interpolation. Usage: scripts/winograd_transforms.py (needs sympy and numpy).
"""
import numpy as np
import sympy as sp

X = sp.symbols("x")
R = sp.Rational

# The point sets collage uses: small magnitudes keep float32 rounding low (each F(4, 7) point
# set with +-3 instead of +-3/2 doubles the error).
TRANSFORMS = {
    "F4x3": (4, 3, [0, 1, -1, 2, -2]),
    "F2x3": (2, 3, [0, 1, -1]),
    "F4x7": (4, 7, [0, 1, -1, 2, -2, R(1, 2), R(-1, 2), R(3, 2), R(-3, 2)]),
    "F2x7": (2, 7, [0, 1, -1, 2, -2, R(1, 2), R(-1, 2)]),
}


def toom_cook(m, r, points):
    n = m + r - 1
    a = [sp.nsimplify(p) for p in points]
    assert len(a) == n - 1
    g_eval, h_eval = sp.zeros(n, r), sp.zeros(n, m)
    for i, p in enumerate(a):
        for k in range(r):
            g_eval[i, k] = p**k
        for k in range(m):
            h_eval[i, k] = p**k
    g_eval[n - 1, r - 1] = 1
    h_eval[n - 1, m - 1] = 1
    interp = sp.zeros(n, n)  # columns: the Lagrange numerators' coefficients, then prod (x - a)
    for i, p in enumerate(a):
        denominator = sp.prod([p - q for j, q in enumerate(a) if j != i])
        numerator = sp.Poly(sp.prod([X - q for j, q in enumerate(a) if j != i]), X)
        for k, c in enumerate(numerator.all_coeffs()[::-1]):
            interp[k, i] = c
        g_eval[i, :] = g_eval[i, :] / denominator
    for k, c in enumerate(sp.Poly(sp.prod([X - q for q in a]), X).all_coeffs()[::-1]):
        interp[k, n - 1] = c
    return h_eval.T, g_eval, interp.T  # A^T, G, B^T


def float32_error(at, g, bt, m, r, channels=256, trials=100):
    """Median and largest |y - exact| / max |exact| of float32 transforms, summed over
    `channels` unit-normal channels, as the kernel sums them."""
    a32 = np.array(at.tolist(), dtype=np.float32)
    g64 = np.array(g.tolist(), dtype=np.float64)
    b32 = np.array(bt.tolist(), dtype=np.float32)
    rng = np.random.default_rng(0)
    errors = []
    for _ in range(trials):
        d = rng.standard_normal((channels, m + r - 1)).astype(np.float32)
        w = rng.standard_normal((channels, r)).astype(np.float32)
        exact = np.array([(d[:, i:i + r].astype(np.float64) * w).sum() for i in range(m)])
        u = (w.astype(np.float64) @ g64.T).astype(np.float32)
        y = a32 @ (u * (d @ b32.T)).sum(axis=0, dtype=np.float32)
        errors.append(np.max(np.abs(y - exact)) / np.max(np.abs(exact)))
    return float(np.median(errors)), float(np.max(errors))


def c_expression(row, var):
    terms = []
    for j, c in enumerate(row):
        c = sp.nsimplify(c)
        if c == 0:
            continue
        if c in (1, -1):
            terms.append(("-" if c == -1 else "") + f"{var}{j}")
        else:
            terms.append((f"{c.p}" if c.q == 1 else f"{float(c)!r}f") + f" * {var}{j}")
    return " + ".join(terms).replace("+ -", "- ") or "0"


def main():
    for name, (m, r, points) in TRANSFORMS.items():
        at, g, bt = toom_cook(m, r, points)
        n = m + r - 1
        median, largest = float32_error(at, g, bt, m, r)
        print(f"{name}: F({m}, {r}), points {', '.join(map(str, points))}, infinity; float32 "
              f"error median {median:.1e}, largest {largest:.1e} of the output's scale")
        for i in range(n):
            print(f"  o{i} = {c_expression([bt[i, j] for j in range(n)], 'd')};")
        for i in range(m):
            print(f"  o{i} = {c_expression([at[i, j] for j in range(n)], 'm')};")
        print("  G = {" + ", ".join("{" + ", ".join(str(g[i, k]) for k in range(r)) + "}"
                                    for i in range(n)) + "}")


if __name__ == "__main__":
    main()

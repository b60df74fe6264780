#!/usr/bin/env python3
"""Writes tests/data/cnn_parity.txt: PyTorch's conv, pool and normalisation
results for tests/c/test_cnn_parity.c (run once; needs torch).

For each case it draws float32 inputs and an upstream gradient gy with a
fixed seed, runs the op and its backward in float64 (the reference) and in
float32 (PyTorch's own error), and records:
  - the float32 inputs, as the C test feeds them to the library;
  - the float64 output and input gradients (d sum(y * gy) / d input);
  - per result tensor, PyTorch-float32's error: max |torch32 - f64|.
The test then holds the library to max |ours - f64| <= 2 * torch32 error
+ 4 ulp of max |f64|, tensor by tensor.

The file is text, a list of records:
    case NAME OP key=value ...          the op and its integer arguments
    t NAME f32|f64 RANK D0 D1 ...       then the tensor's values, each its
                                        bit pattern as one lowercase hex word
                                        (f32: 8 digits, 8 a line; f64: 16
                                        digits, 4 a line), so that they are
                                        read back exactly
    e NAME ERR                          torch32's max error on tensor NAME
                                        (%.17g: the float64 exactly)
    end
Usage: python3 scripts/cnn_parity_fixtures.py [OUT]   (with torch importable)
"""
import os
import sys

import torch
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "cnn_parity.txt")


def conv2d_case(name, n, c, h, w, co, kh, kw, sh=1, sw=1, ph=0, pw=0, dh=1, dw=1, groups=1, bias=True,
                op="conv2d"):
    return (op, name, dict(N=n, C=c, H=h, W=w, CO=co, KH=kh, KW=kw, sh=sh, sw=sw, ph=ph, pw=pw,
                                  dh=dh, dw=dw, groups=groups, bias=int(bias)))


def conv1d_case(name, n, c, l, co, k, s=1, p=0, d=1, groups=1, bias=True):
    return ("conv1d", name, dict(N=n, C=c, L=l, CO=co, K=k, s=s, p=p, d=d, groups=groups, bias=int(bias)))


def pool_case(op, name, n, c, h, w, kh, kw, sh, sw, ph=0, pw=0, ceil=False, include_pad=True, ties=False):
    return (op, name, dict(N=n, C=c, H=h, W=w, KH=kh, KW=kw, sh=sh, sw=sw, ph=ph, pw=pw, ceil=int(ceil),
                           include_pad=int(include_pad), ties=int(ties)))


CASES = [
    conv2d_case("conv2d 3x3 pad 1", 2, 3, 9, 9, 4, 3, 3, ph=1, pw=1),
    conv2d_case("conv2d stride 2", 2, 3, 11, 10, 5, 3, 3, sh=2, sw=2, ph=1, pw=1),
    conv2d_case("conv2d dilation 2", 2, 2, 12, 12, 3, 3, 3, ph=2, pw=2, dh=2, dw=2),
    conv2d_case("conv2d groups 2", 2, 4, 8, 8, 6, 3, 3, ph=1, pw=1, groups=2),
    conv2d_case("conv2d depthwise", 2, 4, 8, 8, 4, 3, 3, ph=1, pw=1, groups=4),
    conv2d_case("conv2d no bias", 1, 3, 7, 7, 2, 3, 3, bias=False),
    conv2d_case("conv2d 5x3 uneven", 2, 3, 13, 9, 4, 5, 3, sh=2, sw=1, ph=2, pw=0, dh=1, dw=2),
    conv2d_case("conv2d 1x1", 2, 8, 6, 6, 5, 1, 1),
    conv2d_case("conv2d network layer", 2, 16, 14, 14, 32, 3, 3, ph=1, pw=1),
    conv2d_case("conv2d first layer", 4, 1, 28, 28, 8, 5, 5, ph=2, pw=2),
    # Enough work to be cut into image tasks (per-task weight gradients).
    conv2d_case("conv2d image tasks", 10, 16, 10, 10, 16, 3, 3, ph=1, pw=1),
    conv1d_case("conv1d k3 pad 1", 2, 3, 20, 4, 3, p=1),
    conv1d_case("conv1d stride dilation groups", 2, 4, 31, 6, 4, s=2, p=3, d=2, groups=2),
    conv1d_case("conv1d no bias", 3, 2, 9, 3, 5, bias=False),
    pool_case("max_pool2d", "max_pool2d 2x2", 2, 3, 8, 8, 2, 2, 2, 2),
    pool_case("max_pool2d", "max_pool2d 3x3 s2 pad 1", 2, 3, 11, 9, 3, 3, 2, 2, 1, 1),
    pool_case("max_pool2d", "max_pool2d ceil", 2, 2, 9, 7, 2, 2, 2, 2, ceil=True),
    pool_case("max_pool2d", "max_pool2d ties", 2, 3, 8, 8, 2, 2, 2, 2, ties=True),
    pool_case("max_pool2d", "max_pool2d overlapping ties", 2, 2, 9, 9, 3, 3, 1, 1, 1, 1, ties=True),
    pool_case("avg_pool2d", "avg_pool2d 2x2", 2, 3, 8, 8, 2, 2, 2, 2),
    pool_case("avg_pool2d", "avg_pool2d pad counted", 2, 3, 9, 9, 3, 3, 2, 2, 1, 1),
    pool_case("avg_pool2d", "avg_pool2d pad not counted", 2, 3, 9, 9, 3, 3, 2, 2, 1, 1, include_pad=False),
    pool_case("avg_pool2d", "avg_pool2d ceil", 2, 2, 10, 7, 3, 2, 2, 2, 1, 0, ceil=True),
    pool_case("avg_pool2d", "avg_pool2d ceil not counted", 2, 2, 10, 7, 3, 3, 2, 2, 1, 1, ceil=True,
              include_pad=False),
    ("global_avg_pool2d", "global_avg_pool2d", dict(N=3, C=5, H=7, W=6)),
    ("batch_norm", "batch_norm [N, C]", dict(N=16, C=6, H=0, W=0, training=1)),
    ("batch_norm", "batch_norm [N, C, H, W]", dict(N=4, C=5, H=6, W=7, training=1)),
    ("batch_norm", "batch_norm eval", dict(N=4, C=5, H=3, W=3, training=0)),
    ("group_norm", "group_norm 2 groups", dict(N=3, C=6, H=5, W=4, groups=2)),
    ("group_norm", "group_norm per channel", dict(N=2, C=4, H=3, W=3, groups=4)),
    ("group_norm", "group_norm [N, C]", dict(N=3, C=8, H=0, W=0, groups=2)),
    # The fused conv + ReLU: relu(conv2d(...)), one cut into image tasks.
    conv2d_case("conv2d_relu stride 2 groups 2", 2, 4, 11, 10, 6, 3, 3, sh=2, sw=2, ph=1, pw=1, groups=2,
                op="conv2d_relu"),
    conv2d_case("conv2d_relu image tasks", 10, 16, 10, 10, 16, 3, 3, ph=1, pw=1, op="conv2d_relu"),
    # Without a weight, a bias or both (PyTorch's affine=False): absent
    # from the case, the C test passes NULL for them.
    ("batch_norm", "batch_norm no affine", dict(N=4, C=5, H=6, W=7, training=1, weight=0, bias=0)),
    ("batch_norm", "batch_norm no affine eval", dict(N=4, C=5, H=3, W=3, training=0, weight=0, bias=0)),
    ("batch_norm", "batch_norm weight only", dict(N=8, C=3, H=2, W=3, training=1, weight=1, bias=0)),
    ("group_norm", "group_norm no affine", dict(N=3, C=6, H=5, W=4, groups=3, weight=0, bias=0)),
    ("group_norm", "group_norm bias only", dict(N=2, C=4, H=3, W=3, groups=2, weight=0, bias=1)),
]

MOMENTUM, EPS = 0.1, 1e-5


def draw(gen, shape, ties=False):
    if ties:
        # Few distinct values, as ReLU zeros give: many tied windows.
        return torch.randint(-2, 3, shape, generator=gen).to(torch.float32)
    return torch.randn(shape, generator=gen, dtype=torch.float32)


def inputs(op, a, gen):
    """The case's float32 inputs (name -> tensor), in the order the C test
    makes them; the upstream gradient gy comes after the output is known."""
    if op in ("conv2d", "conv2d_relu"):
        t = {"x": draw(gen, (a["N"], a["C"], a["H"], a["W"])),
             "w": draw(gen, (a["CO"], a["C"] // a["groups"], a["KH"], a["KW"])) * 0.3}
        if a["bias"]:
            t["b"] = draw(gen, (a["CO"],))
        return t
    if op == "conv1d":
        t = {"x": draw(gen, (a["N"], a["C"], a["L"])),
             "w": draw(gen, (a["CO"], a["C"] // a["groups"], a["K"])) * 0.3}
        if a["bias"]:
            t["b"] = draw(gen, (a["CO"],))
        return t
    if op in ("max_pool2d", "avg_pool2d"):
        return {"x": draw(gen, (a["N"], a["C"], a["H"], a["W"]), ties=bool(a["ties"]))}
    if op == "global_avg_pool2d":
        return {"x": draw(gen, (a["N"], a["C"], a["H"], a["W"]))}
    shape = (a["N"], a["C"]) + ((a["H"], a["W"]) if a["H"] else ())
    # A mean far from zero: the variance's cancellation is part of the test.
    t = {"x": draw(gen, shape) * 2.0 + 3.0}
    if a.get("weight", 1):
        t["w"] = 1.0 + 0.5 * draw(gen, (a["C"],))
    if a.get("bias", 1):
        t["b"] = 0.5 * draw(gen, (a["C"],))
    if op == "batch_norm" and not a["training"]:
        t["running_mean"] = draw(gen, (a["C"],)) + 3.0
        t["running_var"] = torch.rand((a["C"],), generator=gen) * 3.0 + 0.5
    return t


def forward(op, a, t):
    """The op on tensors t (any dtype); returns y and, for batch norm in
    training, the updated running statistics."""
    if op == "conv2d":
        return F.conv2d(t["x"], t["w"], t.get("b"), (a["sh"], a["sw"]), (a["ph"], a["pw"]), (a["dh"], a["dw"]),
                        a["groups"]), {}
    if op == "conv2d_relu":
        return F.relu(F.conv2d(t["x"], t["w"], t.get("b"), (a["sh"], a["sw"]), (a["ph"], a["pw"]),
                               (a["dh"], a["dw"]), a["groups"])), {}
    if op == "conv1d":
        return F.conv1d(t["x"], t["w"], t.get("b"), a["s"], a["p"], a["d"], a["groups"]), {}
    if op == "max_pool2d":
        return F.max_pool2d(t["x"], (a["KH"], a["KW"]), (a["sh"], a["sw"]), (a["ph"], a["pw"]),
                            ceil_mode=bool(a["ceil"])), {}
    if op == "avg_pool2d":
        return F.avg_pool2d(t["x"], (a["KH"], a["KW"]), (a["sh"], a["sw"]), (a["ph"], a["pw"]),
                            ceil_mode=bool(a["ceil"]), count_include_pad=bool(a["include_pad"])), {}
    if op == "global_avg_pool2d":
        return t["x"].mean(dim=(2, 3)), {}
    if op == "group_norm":
        return F.group_norm(t["x"], a["groups"], t.get("w"), t.get("b"), EPS), {}
    c = a["C"]
    dtype = t["x"].dtype
    if a["training"]:
        rm, rv = torch.zeros(c, dtype=dtype), torch.ones(c, dtype=dtype)
    else:
        rm, rv = t["running_mean"].clone(), t["running_var"].clone()
    y = F.batch_norm(t["x"], rm, rv, t.get("w"), t.get("b"), bool(a["training"]), MOMENTUM, EPS)
    return y, ({"running_mean": rm, "running_var": rv} if a["training"] else {})


def run(op, a, base, gy, dtype):
    t = {k: v.to(dtype).requires_grad_(k in ("x", "w", "b")) for k, v in base.items()}
    y, stats = forward(op, a, t)
    (y * gy.to(dtype)).sum().backward()
    out = {"y": y.detach()}
    for k in ("x", "w", "b"):
        if k in t:
            out["d" + k] = t[k].grad
    out.update(stats)
    return out


def write_tensor(f, name, tensor, dtype):
    arr = tensor.detach().to(dtype).contiguous()
    kind = "f32" if dtype == torch.float32 else "f64"
    f.write("t %s %s %d %s\n" % (name, kind, arr.dim(), " ".join(str(d) for d in arr.shape)))
    bits = arr.numpy().view("<u4" if kind == "f32" else "<u8").ravel().tolist()
    digits, per_line = (8, 8) if kind == "f32" else (16, 4)
    words = [format(b, "0%dx" % digits) for b in bits]
    for i in range(0, len(words), per_line):
        f.write(" ".join(words[i : i + per_line]) + "\n")


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else OUT
    torch.manual_seed(0)
    with open(out_path, "w") as f:
        for i, (op, name, a) in enumerate(CASES):
            gen = torch.Generator().manual_seed(1000 + i)
            base = inputs(op, a, gen)
            with torch.no_grad():
                y_shape = forward(op, a, {k: v.clone() for k, v in base.items()})[0].shape
            gy = torch.randn(y_shape, generator=gen, dtype=torch.float32)
            ref = run(op, a, base, gy, torch.float64)
            t32 = run(op, a, base, gy, torch.float32)
            args = " ".join("%s=%d" % kv for kv in a.items())
            f.write("case %s %s %s\n" % (name.replace(" ", "_"), op, args))
            for k, v in base.items():
                write_tensor(f, k, v, torch.float32)
            write_tensor(f, "gy", gy, torch.float32)
            for k, v in ref.items():
                write_tensor(f, k, v, torch.float64)
                err = (t32[k].to(torch.float64) - v).abs().max().item()
                f.write("e %s %.17g\n" % (k, err))
            f.write("end\n")
    print("wrote %d cases to %s (%d bytes)" % (len(CASES), out_path, os.path.getsize(out_path)))


if __name__ == "__main__":
    main()

"""A/B on a GPU: fp8lab.kernels.quantize against an earlier version of the file, in one process, five
interleaved rounds at 128 MiB (v32: the grid that takes more than 65535 sequences); then the flat grid at
65536 sequences. Run from the repository root:

    git show 5c00427:fp8lab/kernels/quantize.py > /tmp/quantize_old.py
    python scripts/probe_quant_grid.py OUT.json /tmp/quantize_old.py
"""
import importlib.util
import json
import sys

import torch

from fp8lab import bench
import fp8lab.kernels.quantize as new

_spec = importlib.util.spec_from_file_location("fp8lab.kernels._quantize_old", sys.argv[2])
old = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(old)

gen = torch.Generator(device="cuda").manual_seed(5)
x = torch.randn(1, 16384, 32, 128, device="cuda", generator=gen, dtype=torch.bfloat16)
x4 = torch.randn(4, 4096, 32, 128, device="cuda", generator=gen, dtype=torch.bfloat16)
qs = torch.tensor([0.05], device="cuda")
n = x.numel()
dst = torch.empty_like(x)
cases = {}
for tag, m in (("old", old), ("new", new)):
    for xn, xx in (("1x16384", x), ("4x4096", x4)):
        cases[(tag, xn, "static")] = lambda m=m, xx=xx: m.quantize_fp8_static(xx, qs)
        cases[(tag, xn, "per-token")] = lambda m=m, xx=xx: m.quantize_fp8(xx, "token")
        cases[(tag, xn, "per-head two-pass")] = lambda m=m, xx=xx: m.quantize_fp8(xx, "head", schedule="two-pass")
        cases[(tag, xn, "per-tensor two-pass")] = lambda m=m, xx=xx: m.quantize_fp8(xx, "tensor", schedule="two-pass")
same = {}
for (tag, xn, k), fn in cases.items():
    if tag == "new":
        a, b = fn(), cases[("old", xn, k)]()
        same[f"{xn} {k}"] = bool(torch.equal(a[0].view(torch.uint8), b[0].view(torch.uint8)) and torch.equal(a[1], b[1]))
rows = []
for rep in range(5):
    copy = bench.median_ms_graph(lambda: dst.copy_(x))
    for key, fn in (cases.items() if rep % 2 == 0 else reversed(list(cases.items()))):
        ms = bench.median_ms_graph(fn)
        rows.append(dict(rep=rep, version=key[0], shape=key[1], kernel=key[2], us=ms * 1e3, frac_copy=(3 * n / ms) / (4 * n / copy)))
out = {"context": __import__("fp8lab.env").env.context(), "same_bits": same, "rows": rows}
json.dump(out, open(sys.argv[1], "w"), indent=1)
import statistics
print("same bits:", same)
for xn in ("1x16384", "4x4096"):
    for k in ("static", "per-token", "per-head two-pass", "per-tensor two-pass"):
        f = {v: statistics.median(r["frac_copy"] for r in rows if r["version"] == v and r["shape"] == xn and r["kernel"] == k) for v in ("old", "new")}
        print(f"{xn:8s} {k:22s} old {f['old']:.3f} new {f['new']:.3f}")
# the flat path at the real limit: 65536 sequences / (batch, head) pairs
from fp8lab.kernels import pretranspose_v, quantize_fp8, quantize_fp8_static
big = {}
v = torch.randn(65536, 1, 1, 64, device="cuda").to(torch.float8_e4m3fn)
vt = pretranspose_v(v)
big["pretranspose_v 65536x1x1x64"] = bool(torch.equal(vt.view(torch.uint8).reshape(65536, 64), v.view(torch.uint8).reshape(65536, 64)))
xb = torch.randn(65536, 2, 1, 64, device="cuda", dtype=torch.bfloat16)
for name, fn in (("head two-pass", lambda: quantize_fp8(xb, "head", schedule="two-pass")),
                 ("token", lambda: quantize_fp8(xb, "token")), ("static", lambda: quantize_fp8_static(xb, 0.1))):
    y, d = fn()
    ref = y.float() * (d[:, None, :, None] if d.dim() == 2 and name != "token" else d[..., None] if name == "token" else d[0, 0])
    big[f"{name} 65536x2x1x64"] = float((ref - xb.float()).abs().max() / xb.float().abs().max())
print("65536:", big)
out["big"] = big
json.dump(out, open(sys.argv[1], "w"), indent=1)

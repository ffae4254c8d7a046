"""Where quantize_fp8 (per head, GQA) and the float64 reference disagree on the GPU: one case
from tests/test_kernels_quantize.py, elements printed. python3 scripts/gpu_quant_probe.py"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch  # noqa: E402

from fp8lab.formats import cast_to_fp8  # noqa: E402
from fp8lab.kernels import quantize_fp8  # noqa: E402

for dtype in (torch.bfloat16, torch.float16):
    gen = torch.Generator().manual_seed(1)
    x = (torch.randn(2, 37, 4, 64, generator=gen) * torch.rand(4, 1, generator=gen) * 10).to(dtype).cuda()
    x[0, 3, 1, 5] = -0.0
    for kw in ({}, {"round_in_fp32": True}):
        y, d = quantize_fp8(x, "head", heads_kv=2, **kw)
        q = (x.double() / d.double().repeat_interleave(2, 1)[:, None, :, None]).float()
        ref = cast_to_fp8(q.cpu().double()).view(torch.uint8)
        got = y.view(torch.uint8).cpu()
        bad = (got != ref).nonzero()
        print(dtype, kw, "mismatches", len(bad), "d", d.tolist())
        for i in bad[:6].tolist():
            t = tuple(i)
            print("   at", t, "x", float(x[t]), "x/d", float(q[t]), "kernel", hex(int(got[t])), float(y[t].float()),
                  "ref", hex(int(ref[t])), float(ref.view(torch.float8_e4m3fn)[t].float()))

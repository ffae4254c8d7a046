"""Run the per-head on-chip quantization kernel a few times on one of v18's shapes, for a profiler.

    PYTHONPATH=. python3 scripts/profile_quant.py SHAPE [REPEATS]

SHAPE: `token-1x16384`, `token-2x8192`, `token-4x4096` (token-major x, (b, s, 32, 128) bf16,
128 MiB in all) or `head-1x16384` (the same bytes as 32 contiguous slices, as head-major x is
quantized). The first calls compile and warm up; profile the last (e.g. `ncu --kernel-name
regex:_onchip --launch-skip 2 --launch-count 1`). Each call's bits are checked against two passes.
"""

from __future__ import annotations

import sys

import torch

from fp8lab.kernels import quantize_fp8


def shape_input(name: str) -> tuple[torch.Tensor, int]:
    """(x, kv heads) for a SHAPE name (module doc)."""
    layout, split = name.split("-")
    b, s = (int(n) for n in split.split("x"))
    x = torch.randn(b, s, 32, 128, device="cuda", dtype=torch.bfloat16)
    if layout == "head":
        return x.view(b * 32, s, 1, 128), 1
    if layout != "token":
        raise ValueError(f"SHAPE is token-BxS or head-BxS, got {name!r}")
    return x, 32


def main(name: str, repeats: int = 3) -> None:
    x, hk = shape_input(name)
    ref_y, ref_d = quantize_fp8(x, "head", heads_kv=hk, schedule="two-pass")
    for _ in range(repeats):
        y, d = quantize_fp8(x, "head", heads_kv=hk, schedule="onchip")
    torch.cuda.synchronize()
    same = torch.equal(d, ref_d) and torch.equal(y.view(torch.uint8), ref_y.view(torch.uint8))
    print(f"{name}: {tuple(x.shape)}, {hk} kv heads, bits as two passes: {same}")


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:]))

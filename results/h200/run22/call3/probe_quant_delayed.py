"""`quantize_fp8_delayed` on the H200: its bits, and its knobs against a copy and the static cast.

    PYTHONPATH=. python3 scripts/probe_quant_delayed.py OUT.json
    PYTHONPATH=. python3 scripts/probe_quant_delayed.py --sizes OUT.json   # 4-256 MiB (`sizes`)
    PYTHONPATH=. python3 scripts/probe_quant_delayed.py --tune OUT.json    # the launch at 16-128 MiB (`tune`)

b.s = 16k tokens x 32 heads x 128 bf16 (128 MiB) as 1 x 16384 and 8 x 2048. Bits and amax against
torch on the GPU (IEEE division, clamp, RNE cast) at three splits, per head, GQA4 and varlen. Then
CUDA-graph replays, in 3 interleaved rounds: a copy of the same bytes, the static cast, and the
delayed kernel at programs per SM x values per tile x warps (`DELAYED_*`).
"""

from __future__ import annotations

import sys

import torch

import fp8lab.kernels.quantize as Q
from fp8lab import bench, env


def torch_reference(x: torch.Tensor, descale: torch.Tensor, heads_kv: int) -> tuple[torch.Tensor, torch.Tensor]:
    b, s, h, d = x.shape
    g = h // heads_kv
    y = (x.float() / descale.repeat_interleave(g, 1)[:, None, :, None]).clamp(-448, 448).to(torch.float8_e4m3fn)
    amax = x.float().abs().reshape(b, s, heads_kv, g, d).amax(dim=(1, 3, 4))
    return y, amax


def main(out: str) -> None:
    gen = torch.Generator(device="cuda").manual_seed(11)
    rows = []
    for b, hk in ((1, 32), (4, 32), (16, 32), (1, 8), (8, 8)):
        s = 16384 // b
        x = torch.randn(b, s, 32, 128, device="cuda", generator=gen, dtype=torch.bfloat16) * 3
        descale = torch.rand(b, hk, device="cuda", generator=gen) * 0.01 + 0.002  # some values saturate
        y, amax = Q.quantize_fp8_delayed(x, descale, heads_kv=hk)
        yr, ar = torch_reference(x, descale, hk)
        yv, av = Q.quantize_fp8_delayed(x.reshape(b * s, 32, 128), descale,
                                        cu_seqlens=torch.arange(0, b * s + 1, s, dtype=torch.int32, device="cuda"),
                                        heads_kv=hk)
        rows.append(dict(check="bits", shape=f"{b}x{s}x32x128", heads_kv=hk,
                         same_bits=bool(torch.equal(y.view(torch.uint8), yr.view(torch.uint8))),
                         same_amax=bool(torch.equal(amax, ar)),
                         varlen_same=bool(torch.equal(yv.view(torch.uint8), y.view(torch.uint8).reshape(-1, 32, 128))
                                          and torch.equal(av, amax)),
                         saturated=float((x.float().abs() / descale.repeat_interleave(32 // hk, 1)[:, None, :, None]
                                          > 448).float().mean())))
        print(rows[-1], flush=True)
    n = 16384 * 32 * 128
    # run21: call 1 swept programs per SM 1-16 x tiles of 4096-32768 values x 4 warps (8 at 16384-32768),
    # best 16 x 4096 at 0.85 of copy; call 2 (with an inf select) one tile per program and 16 amax tables,
    # all <= 0.70; call 3, without the per-value division branch and with one clamp: 8 x 8192 x 4 warps
    # 0.90, 16 x 2048 x 2 0.89, 16 x 4096 x 4 0.86, one tile per program 0.69-0.80; call 4: 8 x 8192 x 4
    # 0.90, 16 x 8192 0.90, 4 x 16384 x 8 0.89, 12 x 8192 0.87, 6 x 8192 0.81; here the default, and GQA4
    knobs = [dict(DELAYED_PROGRAMS_PER_SM=8, DELAYED_TILE_ELEMENTS=8192, DELAYED_WARPS=4)]
    default = {k: getattr(Q, k) for k in knobs[0]}
    shapes = {b: torch.randn(b, 16384 // b, 32, 128, device="cuda", generator=gen, dtype=torch.bfloat16) for b in (1, 8)}
    src = torch.randn(n, device="cuda", generator=gen).to(torch.bfloat16)
    dst = torch.empty_like(src)
    q_scale = torch.tensor([0.05], device="cuda")
    for rep in range(3):
        copy_bw = bench.tbps(4 * n, bench.median_ms_graph(lambda: dst.copy_(src)))
        for b, x in shapes.items():
            descale = torch.full((b, 32), 0.02, device="cuda")
            cases = [("static (vLLM Q)", {}, lambda x=x: Q.quantize_fp8_static(x, q_scale))]
            cases += [("delayed", k, lambda x=x, d=descale: Q.quantize_fp8_delayed(x, d)) for k in knobs]
            cases.append(("delayed GQA4", {}, lambda x=x, d=descale[:, :8].contiguous(): Q.quantize_fp8_delayed(x, d, heads_kv=8)))
            for name, k, fn in cases:
                for key, value in k.items():
                    setattr(Q, key, value)
                ms = bench.median_ms_graph(fn)
                rows.append(dict(rep=rep, shape=f"{b}x{16384 // b}x32x128", kernel=name, **k, ms_graph=ms,
                                 copy_tbps_graph=copy_bw, frac_copy_graph=bench.tbps(3 * n, ms) / copy_bw))
                print(f"{rep} {rows[-1]['shape']} {name} {k} {ms * 1e3:.1f} us {rows[-1]['frac_copy_graph']:.3f}",
                      flush=True)
                for key, value in default.items():
                    setattr(Q, key, value)
    bench.write_results(out, rows, env.context(dtype="bfloat16"))


def sizes(out: str) -> None:
    """Delayed scaling per head and per tensor (a stride-0 descale) against a copy, the static cast,
    per-token and current per-head scaling (`quantize_fp8`'s default schedule), at 4-256 MiB
    (1 x tokens x 32 x 128 bf16), CUDA-graph replays, 3 interleaved rounds; bits against torch."""
    gen = torch.Generator(device="cuda").manual_seed(12)
    rows = []
    q_scale = torch.tensor([0.05], device="cuda")
    for rep in range(3):
        for tokens in (512, 2048, 4096, 8192, 16384, 32768):
            x = torch.randn(1, tokens, 32, 128, device="cuda", generator=gen, dtype=torch.bfloat16)
            n = x.numel()
            dst = torch.empty_like(x)
            copy_bw = bench.tbps(4 * n, bench.median_ms_graph(lambda: dst.copy_(x)))
            d_head = torch.rand(1, 32, device="cuda", generator=gen) * 0.01 + 0.005
            d_tensor = torch.tensor([[0.01]], device="cuda").expand(1, 32)
            if rep == 0:
                for name, d in (("head", d_head), ("tensor", d_tensor)):
                    y, amax = Q.quantize_fp8_delayed(x, d)
                    yr, ar = torch_reference(x, d, 32)
                    rows.append(dict(check="bits", tokens=tokens, descale=name,
                                     same_bits=bool(torch.equal(y.view(torch.uint8), yr.view(torch.uint8))),
                                     same_amax=bool(torch.equal(amax, ar))))
            cases = {"static (vLLM Q)": lambda: Q.quantize_fp8_static(x, q_scale),
                     "per-token": lambda: Q.quantize_fp8(x, "token"),
                     "per-head current (auto)": lambda: Q.quantize_fp8(x, "head"),
                     "per-tensor current (auto)": lambda: Q.quantize_fp8(x, "tensor"),
                     "per-head delayed": lambda: Q.quantize_fp8_delayed(x, d_head),
                     "per-tensor delayed": lambda: Q.quantize_fp8_delayed(x, d_tensor)}
            for name, fn in cases.items():
                ms = bench.median_ms_graph(fn)
                rows.append(dict(rep=rep, tokens=tokens, mib=2 * n >> 20, kernel=name, ms_graph=ms,
                                 copy_tbps_graph=copy_bw, frac_copy_graph=bench.tbps(3 * n, ms) / copy_bw))
                print(f"{rep} {2 * n >> 20:4d} MiB {name:<26} {ms * 1e3:8.1f} us {rows[-1]['frac_copy_graph']:.3f}",
                      flush=True)
    bench.write_results(out, rows, env.context(dtype="bfloat16"))


def tune(out: str) -> None:
    """The delayed kernel's launch at 16-128 MiB (1 x tokens x 32 x 128 bf16, per-head descale):
    the default rule (`_delayed_programs`), and with or without the next tile's load issued before
    this tile's casts (`DELAYED_PREFETCH`) x fixed programs per SM x values per tile, against a
    copy and the static cast, CUDA-graph replays, 3 interleaved rounds. Bits and amax against torch
    for every tile size at 8 x 2048 tokens (programs cross sequences) and varlen. Run22's call 1 ran
    this with a third knob, the tile loop's pipeline stages (`run22/call1/stages.patch`, not kept)."""
    gen = torch.Generator(device="cuda").manual_seed(13)
    knob_names = ("DELAYED_PREFETCH", "DELAYED_MIN_TILES", "DELAYED_PROGRAMS_PER_SM", "DELAYED_TILE_ELEMENTS",
                  "DELAYED_WARPS")
    default = {k: getattr(Q, k) for k in knob_names}
    grid = [dict(default)] + [dict(DELAYED_PREFETCH=pf, DELAYED_MIN_TILES=0, DELAYED_PROGRAMS_PER_SM=p,
                                   DELAYED_TILE_ELEMENTS=t, DELAYED_WARPS=4)
                              for pf in (False, True) for t in (4096, 8192) for p in (3, 4, 6, 8)]
    rows = []

    def use(knobs: dict) -> None:
        for key, value in knobs.items():
            setattr(Q, key, value)

    x8 = torch.randn(8, 2048, 32, 128, device="cuda", generator=gen, dtype=torch.bfloat16) * 3
    d8 = torch.rand(8, 32, device="cuda", generator=gen) * 0.01 + 0.002
    yr, ar = torch_reference(x8, d8, 32)
    cu = torch.arange(0, 8 * 2048 + 1, 2048, dtype=torch.int32, device="cuda")
    for knobs in grid:
        if knobs != default and knobs["DELAYED_PROGRAMS_PER_SM"] != 4:
            continue
        use(knobs)
        y, amax = Q.quantize_fp8_delayed(x8, d8)
        yv, av = Q.quantize_fp8_delayed(x8.reshape(-1, 32, 128), d8, cu_seqlens=cu)
        rows.append(dict(check="bits", **knobs,
                         same_bits=bool(torch.equal(y.view(torch.uint8), yr.view(torch.uint8))),
                         same_amax=bool(torch.equal(amax, ar)),
                         varlen_same=bool(torch.equal(yv.view(torch.uint8), y.view(torch.uint8).reshape(-1, 32, 128))
                                          and torch.equal(av, amax))))
        print(rows[-1], flush=True)
    use(default)
    q_scale = torch.tensor([0.05], device="cuda")
    for rep in range(3):
        for tokens in (2048, 4096, 8192, 16384):
            x = torch.randn(1, tokens, 32, 128, device="cuda", generator=gen, dtype=torch.bfloat16)
            n = x.numel()
            dst = torch.empty_like(x)
            copy_bw = bench.tbps(4 * n, bench.median_ms_graph(lambda: dst.copy_(x)))
            descale = torch.rand(1, 32, device="cuda", generator=gen) * 0.01 + 0.005
            cases = [("static (vLLM Q)", {}, lambda: Q.quantize_fp8_static(x, q_scale))]
            cases += [("delayed", k, lambda: Q.quantize_fp8_delayed(x, descale)) for k in grid]
            for name, knobs, fn in cases:
                use(knobs)
                ms = bench.median_ms_graph(fn)
                use(default)
                rows.append(dict(rep=rep, tokens=tokens, mib=2 * n >> 20, kernel=name, **knobs, ms_graph=ms,
                                 copy_tbps_graph=copy_bw, frac_copy_graph=bench.tbps(3 * n, ms) / copy_bw))
                print(f"{rep} {2 * n >> 20:4d} MiB {name} {knobs} {ms * 1e3:.1f} us {rows[-1]['frac_copy_graph']:.3f}",
                      flush=True)
    bench.write_results(out, rows, env.context(dtype="bfloat16"))


if __name__ == "__main__":
    modes = {"--sizes": sizes, "--tune": tune}
    modes[sys.argv[1]](sys.argv[2]) if sys.argv[1] in modes else main(sys.argv[1])

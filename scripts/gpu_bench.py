#!/usr/bin/env python3
"""H200 run for fp8lab.kernels: correctness on the GPU, then speed against FA3 and vLLM.

One script per device call (device time is scarce): it checks our FP8 attention
and quantization kernels against the FA3 emulation / float64 references on
awkward shapes, sweeps kernel variants (V layout, TMA, block sizes, stages),
then times the issue's grid (b*s = 16k tokens, 32 heads, d 64/128/256, seqlen
4k-16k, causal and not) for our kernel, fa3-fwd FP8, fa3-fwd bf16 and vLLM's FA3
FP8 varlen path, and the quantization kernels against the device copy.

    python3 scripts/gpu_bench.py --out $OUT [--budget 420]
    python3 scripts/gpu_bench.py --out $OUT --quick --budget 130   # v2 vs v4 candidates only
    python3 scripts/gpu_bench.py --out /tmp/x --inspect            # no GPU: registers, spills

Writes bench_<section>.json files (with fp8lab.env.context()) under --out and
prints a short table. Sections stop early when the time budget runs out.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from fp8lab import bench  # noqa: E402
from fp8lab.env import context  # noqa: E402
from fp8lab.kernels import attention as A  # noqa: E402
from fp8lab.kernels.quantize import quantize_fp8, quantize_fp8_delayed, quantize_fp8_static  # noqa: E402


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


class Run:
    def __init__(self, out: Path, budget: float):
        self.out, self.t0, self.budget = out, time.time(), budget
        self.ctx = context(script="scripts/gpu_bench.py")
        self.sections: dict[str, list[dict]] = {}

    def left(self) -> float:
        return self.budget - (time.time() - self.t0)

    def save(self, name: str, rows: list[dict], **meta) -> None:
        self.sections[name] = rows
        bench.write_results(self.out / f"bench_{name}.json", rows, self.ctx, elapsed_s=round(time.time() - self.t0, 1), **meta)


# ----------------------------------------------------------------------------------------
def load_providers(vllm: bool = True) -> dict:
    prov = {}
    try:
        import fa3_fwd_interface as fa3

        prov["fa3"] = fa3
    except Exception as e:  # noqa: BLE001
        print("fa3-fwd unavailable:", e)
    so = ROOT / ".gpu" / "_vllm_fa3_C.abi3.so"
    if not vllm:
        return prov
    try:
        if not so.exists() and (ROOT / ".gpu" / "_vllm_fa3_C.abi3.so.xz").stat().st_size > 0:
            os.system(f"xz -dk {so}.xz")
        torch.ops.load_library(str(so))
        prov["vllm"] = torch.ops._vllm_fa3_C.fwd
    except Exception as e:  # noqa: BLE001
        print("vLLM FA3 unavailable:", e)
    return prov


def fa3_call(fa3, q, k, v, qd, kd, vd, causal):
    r = fa3.flash_attn_func(q, k, v, causal=causal, q_descale=qd, k_descale=kd, v_descale=vd)
    return r[0] if isinstance(r, tuple) else r


def vllm_call(fwd, q, k, v, qd, kd, vd, causal, cu, max_s):
    scale = q.shape[-1] ** -0.5
    return fwd(q, k, v, None, None, None, None, cu, cu, None, None, None, max_s, max_s, None,
               None, None, None, None, None, qd, kd, vd, scale, causal, -1, -1, 0.0, True, None, 0,
               None, 0, None, 1, 0, None)[0]


def make_inputs(b, sq, sk, hq, hk, d, gen, varlen=False):
    """bf16 N(0,1) inputs quantized per head by our own kernel (random, never-one descales)."""
    q = torch.randn(b, sq, hq, d, device="cuda", generator=gen, dtype=torch.bfloat16)
    k = torch.randn(b, sk, hk, d, device="cuda", generator=gen, dtype=torch.bfloat16)
    v = torch.randn(b, sk, hk, d, device="cuda", generator=gen, dtype=torch.bfloat16)
    q8, qd = quantize_fp8(q, "head", heads_kv=hk)
    k8, kd = quantize_fp8(k, "head")
    v8, vd = quantize_fp8(v, "head")
    return q8, k8, v8, qd, kd, vd


# ----------------------------------------------------------------------------------------
@dataclass
class GridInputs:
    """One grid case's FP8 inputs, as every provider takes them: (b, s, h, d) e4m3 tensors, V also
    pre-transposed (`vt`, paid once outside the timing), (b, h) descales, and the varlen views."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    vt: torch.Tensor
    qd: torch.Tensor
    kd: torch.Tensor
    vd: torch.Tensor
    cu: torch.Tensor  # int32 (b + 1,): equal-length sequences of s tokens
    qf: torch.Tensor  # (b * s, h, d) views for the varlen providers
    kf: torch.Tensor
    vf: torch.Tensor


def grid_inputs(run: Run, cases, gen: torch.Generator, section: str, min_left: float = 10.0):
    """Yield (case, GridInputs) for each case while at least `min_left` seconds of budget remain."""
    for case in cases:
        if run.left() < min_left:
            print(f"budget exhausted; {section} stops before", case.label(), flush=True)
            return
        b, s, h, d = case.batch, case.seqlen, case.heads_q, case.head_dim
        q, k, v, qd, kd, vd = make_inputs(b, s, s, h, h, d, gen)
        cu = torch.arange(0, b + 1, device="cuda", dtype=torch.int32) * s
        yield case, GridInputs(q, k, v, A.pretranspose_v(v), qd, kd, vd, cu,
                               *(x.reshape(b * s, h, d) for x in (q, k, v)))


def check_inputs(dims, gen: torch.Generator, causal_modes=(False, True)):
    """The correctness shapes of the ws and v10 sections, per head dim and causal mode: a ragged GQA
    case and a 2k one. Yields (name, causal, (q, k, v, qd, kd, vd), vt, exact float64 output)."""
    from fp8lab.reference.exact import attention_exact

    for d in dims:
        for causal in causal_modes:
            for b, sq, sk, hq, hk in ((2, 203, 208, 8, 2), (1, 2048, 2048, 16, 16)):
                q, k, v, qd, kd, vd = make_inputs(b, sq, sk, hq, hk, d, gen)
                exact = attention_exact(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, causal=causal)
                yield (f"{b}x{sq}/{sk}x{hq}/{hk}x{d}{' causal' if causal else ''}", causal,
                       (q, k, v, qd, kd, vd), A.pretranspose_v(v), exact)


def provider_timings(prov: dict, x: GridInputs, case: "bench.AttentionCase", gen: torch.Generator, *,
                     fa3_varlen: bool = False, vllm: bool = True, bf16: bool = False) -> list:
    """(provider, config label, fn) for the production kernels that are installed, on `x`."""
    causal, s = case.causal, case.seqlen
    timed = []
    if "fa3" in prov:
        timed.append(("fa3-fwd FP8", "", lambda: fa3_call(prov["fa3"], x.q, x.k, x.v, x.qd, x.kd, x.vd, causal)))
    if fa3_varlen and "fa3" in prov:
        timed.append(("fa3-fwd FP8 varlen", "", lambda: fa3_varlen_call(
            prov["fa3"], x.qf, x.kf, x.vf, x.qd, x.kd, x.vd, causal, x.cu, s)))
    if vllm and "vllm" in prov:
        timed.append(("vLLM FA3 FP8 varlen", "", lambda: vllm_call(
            prov["vllm"], x.qf, x.kf, x.vf, x.qd, x.kd, x.vd, causal, x.cu, s)))
    if bf16 and "fa3" in prov:
        qb, kb, vb = (torch.randn(t.shape, device="cuda", dtype=torch.bfloat16, generator=gen) for t in (x.q, x.k, x.v))
        timed.append(("fa3-fwd bf16", "", lambda: fa3_call(prov["fa3"], qb, kb, vb, None, None, None, causal)))
    return timed


def correctness(run: Run, prov: dict) -> None:
    from fp8lab.reference.exact import attention_exact
    from fp8lab.reference.fa3 import attention_fa3_fp8

    gen = torch.Generator(device="cuda").manual_seed(1)
    rows = []
    cases = [(2, 203, 203, 8, 2, d, c) for d in (64, 128, 256) for c in (False, True)]
    if os.environ.get("FP8LAB_BENCH_FULL_CORRECTNESS"):
        cases += [(2, 113, 203, 8, 8, 128, True), (1, 203, 113, 4, 1, 96, True), (1, 203, 113, 4, 1, 192, False)]
    for (b, sq, sk, hq, hk, d, causal) in cases:
        q, k, v, qd, kd, vd = make_inputs(b, sq, sk, hq, hk, d, gen)
        kw = dict(q_descale=qd, k_descale=kd, v_descale=vd, causal=causal)
        exact = attention_exact(q, k, v, **kw)
        base = A.default_config(d, causal)
        emu, else_ = attention_fa3_fp8(q, k, v, qd, kd, vd, causal=causal, block_n=base.block_n, return_lse=True)
        fin = torch.isfinite(else_)
        variants = ["transposed", "transposed-tma"] + (["natural"] if d == 128 else [])
        for variant in variants:
            vv = A.pretranspose_v(v) if variant.startswith("transposed") else v
            cfg = A.AttentionConfig(base.block_m, base.block_n, base.num_warps, base.num_stages, "tma" in variant)
            name = f"{b}x{sq}/{sk}x{hq}/{hk}x{d}{' causal' if causal else ''}"
            try:
                out, lse = A.fp8_attention(q, k, vv, qd, kd, vd, causal=causal, config=cfg, return_lse=True)
                row = dict(case=name, variant=variant, block_n=cfg.block_n, ours_vs_emu=rel_l2(out, emu),
                           emu_vs_exact=rel_l2(emu, exact), ours_vs_exact=rel_l2(out, exact),
                           lse_max_abs=float((lse - else_)[fin].abs().max()),
                           lse_inf_match=bool(torch.equal(torch.isinf(lse), torch.isinf(else_))),
                           finite=bool(torch.isfinite(out).all()))
                if variant == "transposed":
                    out_r = A.fp8_attention(q, k, vv, qd, kd, vd, causal=causal, config=cfg, round_p_in_fp32=True)
                    qd0 = qd[:1, :1].expand_as(qd)
                    o1 = A.fp8_attention(q, k, vv, qd0, kd, vd, causal=causal, config=cfg)
                    o2 = A.fp8_attention(q, k, vv, qd0.contiguous(), kd, vd, causal=causal, config=cfg)
                    o3 = A.fp8_attention(q, k, vv, qd0.t().contiguous().t(), kd, vd, causal=causal, config=cfg)
                    row.update(p_round_fp32_bitwise=bool(torch.equal(out, out_r)),
                               stride0_bitwise=bool(torch.equal(o1, o2) and torch.equal(o1, o3)))
                    if "fa3" in prov and d in (64, 128, 256):
                        f = fa3_call(prov["fa3"], q, k, v, qd, kd, vd, causal)
                        row.update(fa3_vs_emu=rel_l2(f, emu), fa3_vs_exact=rel_l2(f, exact))
            except Exception as e:  # noqa: BLE001
                row = dict(case=name, variant=variant, error=repr(e)[:300])
            row["ratio"] = row.get("ours_vs_emu", math.nan) / max(row.get("emu_vs_exact", math.nan), 1e-30)
            rows.append(row)
    # varlen with GQA and awkward lengths
    lens = [113, 203, 37, 70]
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device="cuda")
    for causal in (False, True):
        q, k, v, qd, kd, vd = make_inputs(1, sum(lens), sum(lens), 8, 2, 128, gen)
        q, k, v = q[0], k[0], v[0]
        qd, kd, vd = (torch.rand(len(lens), 2, device="cuda", generator=gen) * 0.02 + 0.01 for _ in range(3))
        kw = dict(cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=max(lens), max_seqlen_k=max(lens), causal=causal)
        cfg0 = A.default_config(128, causal)
        emu = attention_fa3_fp8(q, k, v, qd, kd, vd, block_n=cfg0.block_n, **kw)
        exact = attention_exact(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, **kw)
        for variant in ("transposed", "natural"):
            vv = A.pretranspose_v(v) if variant.startswith("transposed") else v
            cfg = A.AttentionConfig(cfg0.block_m, cfg0.block_n, cfg0.num_warps, cfg0.num_stages)
            try:
                out = A.fp8_attention(q, k, vv, qd, kd, vd, config=cfg, **kw)
                rows.append(dict(case=f"varlen {lens}x8/2x128{' causal' if causal else ''}", variant=variant,
                                 ours_vs_emu=rel_l2(out, emu), emu_vs_exact=rel_l2(emu, exact),
                                 ratio=rel_l2(out, emu) / rel_l2(emu, exact)))
            except Exception as e:  # noqa: BLE001
                rows.append(dict(case="varlen", variant=variant, error=repr(e)[:300]))
    run.save("correctness", rows)


def knob_sweep(rows: list[dict], module, settings: list[dict], fn, useful_bytes: int, copy_bw: float,
               record: dict) -> None:
    """Time `fn` (CUDA-graph replays) under each setting of `module`'s knobs (name -> value), one row
    each (`record` plus the knobs in lower case), and put the knobs back as they were."""
    defaults = {k: getattr(module, k) for k in {k for setting in settings for k in setting}}
    try:
        for setting in settings:
            for k, v in setting.items():
                setattr(module, k, v)
            cfg = dict(record, **{k.lower(): v for k, v in setting.items()})
            try:
                ms_g = bench.median_ms_graph(fn)
            except Exception as e:  # noqa: BLE001
                rows.append(dict(cfg, error=repr(e)[:200]))
                print(f"  {setting}: error {e!r:.200}", flush=True)
                continue
            rows.append(dict(cfg, ms_graph=ms_g, frac_copy_graph=bench.tbps(useful_bytes, ms_g) / copy_bw))
            print(f"  {record['kernel']} {setting}: {ms_g * 1e3:7.1f} us  {rows[-1]['frac_copy_graph']:.2f} of copy",
                  flush=True)
    finally:
        for k, v in defaults.items():
            setattr(module, k, v)


QUANT_BATCHES = (1, 2, 4, 8, 16)  # b x (16384 / b) tokens: the attention grid's b.s = 16k (b = 1, 2, 4), and beyond


def quant_shapes(run: Run, repeats: int = 3) -> None:
    """v18: quantization at b.s = 16k tokens x 32 heads x 128 (128 MiB of bf16) for each batch in
    QUANT_BATCHES, as the attention grid splits its tokens: per head on chip with x token-major
    (b, s, h, d) and head-major (stored (b, h, s, d)), one and 4 query heads per kv head, its bits
    against two passes, and the one-pass and two-pass references; `repeats` interleaved rounds."""
    gen = torch.Generator(device="cuda").manual_seed(3)
    q_scale = torch.tensor([0.05], device="cuda")
    cases = []  # (batch, kernel, x, fn, two-pass reference or None)
    for b in QUANT_BATCHES:
        s = 16384 // b
        x = torch.randn(b, s, 32, 128, device="cuda", generator=gen, dtype=torch.bfloat16)
        xh = torch.randn(b, 32, s, 128, device="cuda", generator=gen, dtype=torch.bfloat16).transpose(1, 2)
        for name, xx, kw in (("per-head onchip", x, {}), ("per-head onchip, head-major x", xh, {}),
                             ("per-head GQA4 onchip", x, dict(heads_kv=8)),
                             ("per-head GQA4 onchip, head-major x", xh, dict(heads_kv=8))):
            ref = quantize_fp8(xx, "head", schedule="two-pass", **kw)
            cases.append((b, name, xx, lambda xx=xx, kw=kw: quantize_fp8(xx, "head", schedule="onchip", **kw), ref))
        cases += [(b, "per-head two-pass", x, lambda x=x: quantize_fp8(x, "head", schedule="two-pass"), None),
                  (b, "per-tensor two-pass", x, lambda x=x: quantize_fp8(x, "tensor", schedule="two-pass"), None),
                  (b, "per-token", x, lambda x=x: quantize_fp8(x, "token"), None),
                  (b, "static (vLLM Q)", x, lambda x=x: quantize_fp8_static(x, q_scale), None)]
        # v25: delayed scaling, a descale per (sequence, head) known before x, and x's amax, in one pass
        d_head = torch.rand(b, 32, device="cuda", generator=gen) * 0.01 + 0.005
        cases += [(b, "per-head delayed", x, lambda x=x, d=d_head: quantize_fp8_delayed(x, d), None),
                  (b, "per-head delayed, head-major x", xh, lambda xh=xh, d=d_head: quantize_fp8_delayed(xh, d), None),
                  (b, "per-head GQA4 delayed", x,
                   lambda x=x, d=d_head[:, :8].contiguous(): quantize_fp8_delayed(x, d, heads_kv=8), None)]
    n = 16384 * 32 * 128
    src = torch.randn(n, device="cuda", generator=gen).to(torch.bfloat16)
    dst = torch.empty_like(src)
    rows = []
    for rep in range(repeats):
        copy_bw = bench.tbps(4 * n, bench.median_ms_graph(lambda: dst.copy_(src)))
        for b, name, xx, fn, ref in cases:
            same = None
            if ref is not None:
                y, d = fn()
                same = bool(torch.equal(d, ref[1]) and torch.equal(y.view(torch.uint8), ref[0].view(torch.uint8)))
            ms_g = bench.median_ms_graph(fn)
            rows.append(dict(rep=rep, batch=b, tokens=16384 // b, size=f"{b}x{16384 // b}x32x128 (128 MiB)", kernel=name,
                             same_bits=same, ms_graph=ms_g, copy_tbps_graph=copy_bw,
                             frac_copy_graph=bench.tbps(3 * n, ms_g) / copy_bw))
            print(f"{rep} {rows[-1]['size']:<24} {name:<36} {ms_g * 1e3:7.1f} us  {rows[-1]['frac_copy_graph']:.3f} "
                  f"of copy  bits {same}", flush=True)
    run.save("quant_shapes", rows)


def quant_shapes_summary(run: Run) -> None:
    rows = run.sections.get("quant_shapes", [])
    kernels = list(dict.fromkeys(r["kernel"] for r in rows))
    print(f"\n{'of copy (min-max)':<36}" + "".join(f"{b}x{16384 // b:<9}" for b in QUANT_BATCHES))
    for k in kernels:
        cells = []
        for b in QUANT_BATCHES:
            f = [r["frac_copy_graph"] for r in rows if r["kernel"] == k and r["batch"] == b]
            cells.append(f"{min(f):.2f}-{max(f):.2f}" if f else "-")
        print(f"{k:<36}" + "".join(f"{c:<11}" for c in cells))
    bad = [r for r in rows if r["same_bits"] is False]
    print("bits: every on-chip row as two passes" if not bad else f"bits DIFFER in {len(bad)} rows")


def quant(run: Run) -> None:
    """Quantization kernels: bitwise checks, then bandwidth against the device copy at 128, 32
    and 16 MiB (v7: the fused per-head / per-tensor schedule against two passes, and its knobs;
    v13: the on-chip schedule, its bits against two passes, its fallback, and its knobs; v14: its
    bf16 pairs, its rounds of whole slices, and what its waiting costs; v15: its warp-specialized
    form, and 4 query heads per kv head; v16: the waiter's one read of a slice's table entries;
    v17: 64 KiB parts for 4 query heads per kv head). v9's resident schedule and its knobs were
    measured with this script at commit b1c3a16 (notes, v9)."""
    import fp8lab.kernels.quantize as Qm
    import fp8lab.kernels.quantize_onchip as Om
    from fp8lab.formats import cast_to_fp8

    onchip_spins = Om.SPINS

    gen = torch.Generator(device="cuda").manual_seed(2)
    rows = []
    # bitwise against the torch reference (formats.cast_to_fp8) on an awkward shape
    x = torch.randn(3, 203, 8, 128, device="cuda", generator=gen, dtype=torch.bfloat16) * 7
    y, d = quantize_fp8(x, "head", heads_kv=4)
    am = x.float().abs().reshape(3, 203, 4, 2, 128).amax(dim=(1, 3, 4))
    c448 = torch.tensor(448.0, device="cuda")  # tensor divisor: IEEE division (a Python scalar becomes a reciprocal multiply)
    ref = cast_to_fp8(x.float() / (am / c448).repeat_interleave(2, 1)[:, None, :, None])
    yt, dt = quantize_fp8(x, "token")
    dref = x.float().abs().amax(-1) / c448
    reft = cast_to_fp8(x.float() / dref[..., None])
    ys, _ = quantize_fp8_static(x, 0.0123)
    refs = cast_to_fp8(torch.clamp(x.float() * (1 / torch.tensor(0.0123, device="cuda")), -448, 448))
    yr, _ = quantize_fp8(x, "head", heads_kv=4, round_in_fp32=True)
    same = lambda a, b: bool(torch.equal(a[1], b[1]) and torch.equal(a[0].view(torch.uint8), b[0].view(torch.uint8)))  # noqa: E731
    xv, cu = x.reshape(609, 8, 128), torch.tensor([0, 100, 100, 609], dtype=torch.int32, device="cuda")
    fused_same = []
    for gb in (None, 1 << 16, 1):  # L2-sized lag, small lag, one slice
        Qm.FUSED_LAG_BYTES = gb
        for gran in ("head", "tensor"):
            for xx, kw in ((x, dict(heads_kv=4)), (xv, dict(cu_seqlens=cu))):
                two = quantize_fp8(xx, gran, schedule="two-pass", **kw)
                fused_same.append(all(same(quantize_fp8(xx, gran, schedule="fused", **kw), two) for _ in range(10)))
    Qm.FUSED_LAG_BYTES = None
    onchip_same = []  # v13: the on-chip schedule, batched / varlen / GQA, per head / per tensor, and its fallback
    xl = torch.randn(2, 3000, 8, 128, device="cuda", generator=gen, dtype=torch.bfloat16)
    cul = torch.tensor([0, 700, 1900, 3000], dtype=torch.int32, device="cuda")
    onchip_ws_from = Om.WS_FROM_BYTES
    for ws_from, spins in ((None, None), (None, 0), (0, None), (0, 0)):  # v15: the warp-specialized kernel too
        Om.SPINS = Om.SPINS if spins is None else spins
        Om.WS_FROM_BYTES = Om.WS_FROM_BYTES if ws_from is None else ws_from
        for gran in ("head", "tensor"):
            for xx, kw in ((x, dict(heads_kv=4)), (xv, dict(cu_seqlens=cu)), (xl, {}), (xl, dict(heads_kv=2)),
                           (xl.reshape(6000, 8, 128)[:3000], dict(cu_seqlens=cul)),
                           (xl.reshape(6000, 8, 128)[:3000], dict(cu_seqlens=cul, heads_kv=2))):
                two = quantize_fp8(xx, gran, schedule="two-pass", **kw)
                onchip_same.append(all(same(quantize_fp8(xx, gran, schedule="onchip", **kw), two) for _ in range(10)))
        Om.SPINS, Om.WS_FROM_BYTES = onchip_spins, onchip_ws_from
    rows.append(dict(check="bitwise", head=bool(torch.equal(y.view(torch.uint8), ref.view(torch.uint8))),
                     head_descale=bool(torch.equal(d, am / c448)),
                     token=bool(torch.equal(yt.view(torch.uint8), reft.view(torch.uint8))),
                     token_descale=bool(torch.equal(dt, dref)),
                     static=bool(torch.equal(ys.view(torch.uint8), refs.view(torch.uint8))),
                     round_fp32_same=bool(torch.equal(yr.view(torch.uint8), y.view(torch.uint8))),
                     fused_equals_two_pass=f"{sum(fused_same)}/{len(fused_same)}",
                     onchip_equals_two_pass=f"{sum(onchip_same)}/{len(onchip_same)}"))
    print(rows[-1], flush=True)
    # bandwidth: 16k tokens x 32 heads x 128 (128 MiB of bf16: 2.5x the L2), x 8 heads (32 MiB: fits), and
    # x 4 heads (16 MiB: per tensor, all of x fits in the SMs' shared memory)
    q_scale = torch.tensor([0.05], device="cuda")  # on the device, as vLLM keeps layer._q_scale
    for heads in (32, 8, 4):
        x = torch.randn(1, 16384, heads, 128, device="cuda", generator=gen, dtype=torch.bfloat16)
        n = x.numel()
        size = f"1x16384x{heads}x128 ({2 * n >> 20} MiB)"
        dst = torch.empty_like(x)
        ms_g = bench.median_ms_graph(lambda: dst.copy_(x))
        copy_bw = bench.tbps(4 * n, ms_g)
        rows.append(dict(size=size, kernel="copy bf16->bf16 (torch)", ms_graph=ms_g, tbps_graph=copy_bw, frac_copy_graph=1.0))
        for name, fn in [
            ("static (vLLM Q)", lambda: quantize_fp8_static(x, q_scale)),
            ("per-token", lambda: quantize_fp8(x, "token")),
            ("per-head onchip", lambda: quantize_fp8(x, "head", schedule="onchip")),
            ("per-head fused", lambda: quantize_fp8(x, "head", schedule="fused")),
            ("per-head two-pass", lambda: quantize_fp8(x, "head", schedule="two-pass")),
            # v15: 4 query heads per kv head (Q for FA3's (batch, kv heads) descale), 4x larger slices
            ("per-head GQA4 onchip", lambda: quantize_fp8(x, "head", heads_kv=heads // 4, schedule="onchip")),
            ("per-head GQA4 two-pass", lambda: quantize_fp8(x, "head", heads_kv=heads // 4, schedule="two-pass")),
            ("per-tensor onchip", lambda: quantize_fp8(x, "tensor", schedule="onchip")),
            ("per-tensor fused", lambda: quantize_fp8(x, "tensor", schedule="fused")),
            ("per-tensor two-pass", lambda: quantize_fp8(x, "tensor", schedule="two-pass")),
        ]:
            try:
                ms_g = bench.median_ms_graph(fn)
            except Exception as e:  # noqa: BLE001
                rows.append(dict(size=size, kernel=name, error=repr(e)[:300]))
                print(f"{size:<28} {name:<22} error {e!r:.200}", flush=True)
                continue
            rows.append(dict(size=size, kernel=name, ms_graph=ms_g, useful_tbps_graph=bench.tbps(3 * n, ms_g),
                             frac_copy_graph=bench.tbps(3 * n, ms_g) / copy_bw))
            print(f"{size:<28} {name:<22} {ms_g * 1e3:7.1f} us  {rows[-1]['frac_copy_graph']:.2f} of copy", flush=True)
        if heads == 4:  # v15: what a zeroed table per call (v14's way) costs where the kernel is shortest
            fresh = [dict(_FRESH_TABLE=f) for f in (False, True, False, True)]
            for gran in ("head", "tensor"):
                knob_sweep(rows, Om, fresh, lambda: quantize_fp8(x, gran, schedule="onchip"), 3 * n, copy_bw,
                           dict(size=size, kernel=f"per-{gran} onchip"))
            continue
        # the on-chip kernel's knobs, per head (v13: part bytes, buffers, lead, warps, programs per SM;
        # v14: bf16 as word pairs, values per thread, programs aligned to slices, and what waiting costs:
        # _WAIT 1 casts with the table as first read, 0 reads no table; wrong bits, timing only)
        # v15: the warp-specialized kernel (WS) at every size (WS_FROM_BYTES=0) or none (WS=False), its programs
        # per SM and buffers, v14's kernel with one program of 8 warps and 64 KiB parts per SM, and a zeroed
        # table per call (_FRESH_TABLE, v14's way) against the tagged one kept across calls
        # v16: v15's waiter, reading the table 128 entries at a time; v17: GQA4 below 64 MiB with v16's parts
        base = dict(PART_BYTES=32 << 10, BUFFERS=3, LEAD=1, WARPS=4, CTAS_PER_SM=2, PAIRS=True, VEC=8, ALIGN=True,
                    _WAIT=2, WS=True, WS_FROM_BYTES=64 << 20, WS_CTAS_PER_SM=1, WS_BUFFERS=6, _FRESH_TABLE=False,
                    WAIT_CHUNK=256, GROUP_FROM=4, GROUP_PART_BYTES=64 << 10, GROUP_WARPS=8)
        v15_waits = dict(WAIT_CHUNK=128)
        onchip = [dict(base, **change) for change in (
            {}, v15_waits, dict(WS=False), dict(WS_FROM_BYTES=0), dict(WS_FROM_BYTES=0, WARPS=8),
            dict(WS_FROM_BYTES=0, WS_CTAS_PER_SM=2, WS_BUFFERS=3),
            dict(WS=False, ALIGN=False), dict(WS=False, PAIRS=False), dict(WS=False, VEC=16),
            dict(WS=False, PART_BYTES=64 << 10, WARPS=8, CTAS_PER_SM=1),
            dict(WS=False, _WAIT=1), dict(WS=False, _WAIT=0), dict(_FRESH_TABLE=True),
            dict(WS=False, _FRESH_TABLE=True), {}, dict(WS=False))]  # the first two again: spread
        knob_sweep(rows, Om, onchip, lambda: quantize_fp8(x, "head", schedule="onchip"), 3 * n, copy_bw,
                   dict(size=size, kernel="per-head onchip"))
        # (v15's explicit 64 KiB / 8 warps / 1 program row is v17's GQA parts now: below 64 MiB the default,
        # above it `WS=False`)
        gqa = [dict(base, **change) for change in ({}, dict(GROUP_FROM=99), v15_waits, dict(WS=False),
                                                   dict(WS_FROM_BYTES=0))]
        knob_sweep(rows, Om, gqa, lambda: quantize_fp8(x, "head", heads_kv=heads // 4, schedule="onchip"), 3 * n,
                   copy_bw, dict(size=size, kernel="per-head GQA4 onchip"))
        if heads != 32:
            continue
        # the fused kernel's knobs, per head and per tensor at 128 MiB (v7)
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        for gran in ("head", "tensor"):
            fused = [dict(FUSED_TILE_ELEMENTS=tile, FUSED_WARPS=warps, FUSED_LAG_BYTES=gb)
                     for tile, warps in ((8192, 4), (8192, 8), (16384, 4))
                     for gb in ((l2 // 8, l2 // 4, l2 // 2) if gran == "head" else (l2 // 4,))]
            knob_sweep(rows, Qm, fused, lambda: quantize_fp8(x, gran, schedule="fused"), 3 * n, copy_bw,
                       dict(size=size, kernel=f"per-{gran} fused"))
    run.save("quant", rows, l2_bytes=torch.cuda.get_device_properties(0).L2_cache_size,
             sms=torch.cuda.get_device_properties(0).multi_processor_count)


# ----------------------------------------------------------------------------------------
def time_ours(q, k, v, qd, kd, vd, causal, cfg):
    return bench.median_ms(lambda: A.fp8_attention(q, k, v, qd, kd, vd, causal=causal, config=cfg))


def sweep(run: Run, budget_frac: float) -> dict:
    """Variants at s=8k (b=2), 32 heads; returns the best (config, layout) per (d, causal)."""
    gen = torch.Generator(device="cuda").manual_seed(3)
    rows, best = [], {}
    C = A.AttentionConfig
    T = "transposed"

    # v4 candidates (docs/kernel-notes.md): the v2 winners and their neighbours. Persistent
    # scheduling (v3) measured slower and was removed.
    plan = {  # (config, V layout), non-causal; causal re-times the 3 fastest plus its own list
        128: [(C(128, 128, 4, 3), T), (C(128, 64, 4, 3), T), (C(64, 128, 4, 3), T), (C(128, 128, 8, 3), T),
              (C(128, 128, 4, 3, True), T), (C(128, 128, 4, 3), "natural")],
        64: [(C(128, 128, 4, 4), T), (C(128, 128, 4, 3), T), (C(64, 128, 4, 3), T), (C(64, 64, 4, 4), T)],
        256: [(C(128, 64, 8, 4), T), (C(128, 64, 8, 3), T), (C(128, 64, 8, 3, False, True), T), (C(64, 64, 4, 3), T)],
    }
    plan_causal = {
        128: [(C(128, 64, 4, 3), T), (C(64, 128, 4, 3), T)],
        64: [(C(128, 128, 4, 3), T)],
        256: [(C(128, 64, 8, 3), T)],
    }
    stop = time.time() + run.left() * budget_frac
    for d in (128, 64, 256):
        case = bench.AttentionCase(2, 8192, 32, 32, d, False)
        q, k, v, qd, kd, vd = make_inputs(2, 8192, 8192, 32, 32, d, gen)
        vt = A.pretranspose_v(v)
        results = []
        for causal in (False, True):
            if not causal:
                cands = plan[d]
            else:
                top = [x for x, _ in sorted(results, key=lambda r: -r[1])[:3]]
                cands = top + [x for x in plan_causal[d] if x not in top]
            for cfg, lay in cands:
                if time.time() > stop:
                    break
                vv = vt if lay.startswith("transposed") else v
                t0 = time.time()
                try:
                    ms = time_ours(q, k, vv, qd, kd, vd, causal, cfg)
                    tf = bench.tflops(bench.AttentionCase(2, 8192, 32, 32, d, causal).flops(), ms)
                    rows.append(dict(head_dim=d, causal=causal, config=cfg.label(), layout=lay, ms=ms, tflops=tf,
                                     compile_and_time_s=round(time.time() - t0, 1)))
                    if not causal and lay == T:
                        results.append(((cfg, lay), tf))
                    if lay == T and ((d, causal) not in best or tf > best[(d, causal)][2]):
                        best[(d, causal)] = (cfg, lay, tf)
                except Exception as e:  # noqa: BLE001
                    rows.append(dict(head_dim=d, causal=causal, config=cfg.label(), layout=lay, error=repr(e)[:300]))
                print(rows[-1], flush=True)
        # cost of the explicit pre-transpose of V, against the attention it feeds
        ms_t = bench.median_ms(lambda v=v: A.pretranspose_v(v))
        rows.append(dict(head_dim=d, causal=None, config="pretranspose_v", layout="copy", ms=ms_t, case=case.label()))
        run.save("sweep", rows, best={f"{k[0]}-{k[1]}": [v[0].label(), v[1], v[2]] for k, v in best.items()})
        del q, k, v, vt
    return best


def grid(run: Run, best: dict, prov: dict) -> None:
    gen = torch.Generator(device="cuda").manual_seed(4)
    rows = []
    for case, x in grid_inputs(run, bench.bench_grid(), gen, "grid", min_left=15):
        d, causal, flops = case.head_dim, case.causal, case.flops()

        def add(provider, fn):
            try:
                ms = bench.median_ms(fn)
                rows.append(dict(case=case.label(), head_dim=d, seqlen=case.seqlen, batch=case.batch, causal=causal,
                                 provider=provider, ms=ms, tflops=bench.tflops(flops, ms)))
            except Exception as e:  # noqa: BLE001
                rows.append(dict(case=case.label(), provider=provider, error=repr(e)[:300]))

        cfg, lay, _ = best.get((d, causal), (A.default_config(d, causal), "transposed", None))
        vv = x.vt if lay.startswith("transposed") else x.v
        add("fp8lab", lambda: A.fp8_attention(x.q, x.k, vv, x.qd, x.kd, x.vd, causal=causal, config=cfg))
        rows[-1].update(config=cfg.label(), layout=lay)
        if lay.startswith("transposed"):  # the same kernel, paying the transpose of V on every call
            add("fp8lab+transpose", lambda: A.fp8_attention(x.q, x.k, A.pretranspose_v(x.v), x.qd, x.kd, x.vd,
                                                            causal=causal, config=cfg))
        for provider, _, fn in provider_timings(prov, x, case, gen, bf16=True):
            add(provider, fn)
        run.save("grid", rows)


# ----------------------------------------------------------------------------------------
def fa3_varlen_call(fa3, q, k, v, qd, kd, vd, causal, cu, max_s):
    r = fa3.flash_attn_varlen_func(q, k, v, cu, cu, max_s, max_s, causal=causal,
                                   q_descale=qd, k_descale=kd, v_descale=vd)
    return r[0] if isinstance(r, tuple) else r


def v5_candidates(d: int, causal: bool) -> list[tuple[str, "A.AttentionConfig"]]:
    """The current default for (head_dim, causal), then the v5 (`pipeline_qk`) candidates."""
    return [("default", A.default_config(d, causal))] + [("v5", c) for c in A.V5_CANDIDATES.get(d, [])]


def _c(label: str) -> "A.AttentionConfig":
    """An AttentionConfig from its label, e.g. 'm64n128w4s4-r168-pq'."""
    import re

    m = re.fullmatch(r"m(\d+)n(\d+)w(\d+)s(\d+)((?:-[a-z]+\d*)*)", label)
    if not m:
        raise ValueError(f"config label: expected like 'm128n64w4s3-r168-pq', got {label!r}")
    opts = m.group(5)
    reg = re.search(r"-r(\d+)", opts)
    ms = re.search(r"-ms(\d+)", opts)
    return A.AttentionConfig(int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)),
                             use_tma="-tma" in opts, warp_specialize="-ws" in opts,
                             masked_stages=int(ms.group(1)) if ms else 0, maxnreg=int(reg.group(1)) if reg else None,
                             pipeline_qk="-pq" in opts, permute_keys="-pk" in opts)


# v6 exploration (after the v5 run): block shapes that fit 3-4 programs per SM under a register
# cap, 8-warp programs, deeper pipelines; each spill-free in an offline compile with the H200
# host's Triton 3.6 and ptxas (stack <= 16 bytes, no wgmma serialization).
V6_CANDIDATES: dict[tuple[int, bool], list[str]] = {
    (64, False): ["m64n128w4s5-r168", "m64n64w4s4-r128", "m128n64w4s4-r168", "m64n64w4s3-r128"],
    (64, True): ["m64n128w4s4-r168", "m64n64w4s4-r128", "m64n64w4s3-r128", "m128n64w4s4-r168"],
    (128, False): ["m128n128w8s3", "m64n64w4s3-r168", "m128n64w4s3"],
    (128, True): ["m128n64w4s4", "m64n64w4s3-r168", "m64n64w4s4-r168", "m128n128w8s3", "m128n64w8s3"],
    (256, False): ["m128n128w8s2", "m128n64w8s4-pq", "m64n64w4s3", "m64n64w4s2-r240", "m128n64w8s3-r240-pq"],
    (256, True): ["m128n64w8s3-pq", "m128n64w8s4-pq", "m128n128w8s2", "m64n64w4s3", "m128n64w8s3-r240-pq"],
}


def v6_candidates(d: int, causal: bool) -> list[tuple[str, "A.AttentionConfig"]]:
    default = A.default_config(d, causal)
    return [("default", default)] + [("v6", c) for c in map(_c, V6_CANDIDATES[(d, causal)]) if c != default]


def v5(run: Run, prov: dict, candidates=None, section: str = "v5", full: bool = True) -> None:
    """The whole grid with every v5 candidate next to the default and the other providers (--v5).

    Correctness first (each candidate against the emulation on the GPU), then per grid case:
    our default config, each v5 candidate, fa3-fwd FP8 (batched and varlen), fa3-fwd bf16 and
    vLLM's FA3 FP8 varlen, all on the same inputs. A few cases also time the v2 host path
    (descale value checks, i.e. device syncs, before the launch) to measure what it cost.
    """
    from fp8lab.layout import check_attention_inputs
    from fp8lab.reference.exact import attention_exact
    from fp8lab.reference.fa3 import attention_fa3_fp8

    gen = torch.Generator(device="cuda").manual_seed(6)
    rows: list[dict] = []
    for d in (64, 128, 256):
        for causal in (False, True):
            if run.left() < 0.75 * run.budget:
                print("correctness checks stop early to leave time for the timings", flush=True)
                break
            b, s, hq, hk = (1, 2048, 16, 16)
            q, k, v, qd, kd, vd = make_inputs(b, s, s, hq, hk, d, gen)
            vt = A.pretranspose_v(v)
            exact = attention_exact(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, causal=causal)
            emus: dict[int, torch.Tensor] = {}
            for tag, cfg in (candidates or v5_candidates)(d, causal):
                t0 = time.time()
                name = f"{b}x{s}x{hq}/{hk}x{d}{' causal' if causal else ''}"
                try:
                    if cfg.block_n not in emus:
                        emus[cfg.block_n] = attention_fa3_fp8(q, k, v, qd, kd, vd, block_n=cfg.block_n, causal=causal)
                    emu = emus[cfg.block_n]
                    out = A.fp8_attention(q, k, vt, qd, kd, vd, config=cfg, causal=causal)
                    e_emu, e_exact = rel_l2(out, emu), rel_l2(emu, exact)
                    rows.append(dict(section="correctness", case=name, version=tag, config=cfg.label(),
                                     ours_vs_emu=e_emu, emu_vs_exact=e_exact, ratio=e_emu / max(e_exact, 1e-30),
                                     finite=bool(torch.isfinite(out).all()), s=round(time.time() - t0, 1)))
                except Exception as e:  # noqa: BLE001
                    rows.append(dict(section="correctness", case=name, version=tag, config=cfg.label(),
                                     error=repr(e)[:300]))
                print(rows[-1], flush=True)
            run.save(section, rows)
            del q, k, v, vt, exact, emus

    host_path_cases = {"4x4096x32x64 causal", "4x4096x32x128 causal", "1x16384x32x128"}
    for case, x in grid_inputs(run, bench.bench_grid(), gen, section):
        causal = case.causal
        timed = [(tag, cfg.label(), (lambda cfg=cfg: A.fp8_attention(x.q, x.k, x.vt, x.qd, x.kd, x.vd,
                                                                     causal=causal, config=cfg)))
                 for tag, cfg in (candidates or v5_candidates)(case.head_dim, causal)]
        if full and case.label() in host_path_cases:
            cfg0 = A.default_config(case.head_dim, causal)

            def v2_host_path(cfg=cfg0):
                check_attention_inputs(x.q, x.k, x.v, q_descale=x.qd, k_descale=x.kd, v_descale=x.vd)
                return A.fp8_attention(x.q, x.k, x.vt, x.qd, x.kd, x.vd, causal=causal, config=cfg)
            timed.append(("v2 host path", cfg0.label(), v2_host_path))
        timed += provider_timings(prov, x, case, gen, fa3_varlen=full, vllm=full, bf16=full)
        time_rows(run, rows, case, timed)
        run.save(section, rows)


def derive_grid(raw_path: Path) -> Path:
    """bench_v5_grid.json from a --v5 run's raw rows: one row per (case, provider), in the v2
    grid's schema, so notebook 07 reads it like every grid. "fp8lab" is the config that is the
    default now (`A.default_config`), timed in that same run; candidates stay in the raw file."""
    raw = bench.load_results(raw_path)
    rows = []
    for r in raw["rows"]:
        if r.get("section") != "speed" or "tflops" not in r:
            continue
        r = {k: r[k] for k in ("case", "head_dim", "seqlen", "batch", "causal", "provider", "config", "ms", "tflops")}
        if r["provider"] in ("default", "v5"):
            if r["config"] != A._MEASURED_DEFAULTS[(r["head_dim"], r["causal"])].label():
                continue
            r.update(provider="fp8lab", layout="transposed")
        rows.append(r)
    out = raw_path.with_name(raw_path.name.replace("_raw", "_grid"))
    bench.write_results(out, rows, raw["context"], derived_from=raw_path.name,
                        note="fp8lab = the current default config per case, from the same run as the other providers")
    return out


def report_checks(name: str, rows: list[dict], bound: float = 0.5, also_bad=lambda r: False) -> None:
    """Print how many correctness rows `rows` holds and each flagged one: an error, |ours - emulation|
    not below `bound` x the emulation's own error, or `also_bad(row)`."""
    checks = [r for r in rows if r.get("section", "correctness") == "correctness"]
    bad = [r for r in checks if "error" in r or not r.get("ratio", math.inf) < bound or also_bad(r)]
    print(f"\n{name} correctness: {len(checks)} rows, flagged {len(bad)}")
    for r in bad:
        print("  ", r)


def v5_summary(run: Run, section: str = "v5") -> None:
    rows = run.sections.get(section, [])
    report_checks("v5", rows)
    speed = [r for r in rows if r.get("section") == "speed" and "tflops" in r]
    by_case: dict[str, dict[str, tuple[str, float]]] = {}
    for r in speed:
        key = r["provider"] if r["provider"] not in ("v5", "v6") else "v5:" + r["config"]
        by_case.setdefault(r["case"], {})[key] = (r["config"], r["tflops"])
    print(f"{'case':<24} {'default':>8} {'best v5':>8} {'config':<18} {'FA3fp8':>7} {'x':>5} {'bf16':>6} {'vllm':>6} {'fa3vl':>6} {'v2host':>6}")
    for case, d in by_case.items():
        v5s = [(v[1], v[0]) for key, v in d.items() if key.startswith("v5:")]
        best = max(v5s) if v5s else (float("nan"), "")
        fa3 = d.get("fa3-fwd FP8", ("", float("nan")))[1]
        top = max(best[0], d.get("default", ("", 0))[1])
        g = lambda key: d.get(key, ("", float("nan")))[1]  # noqa: E731
        print(f"{case:<24} {g('default'):8.0f} {best[0]:8.0f} {best[1]:<18} {fa3:7.0f} {top / fa3:5.2f} "
              f"{g('fa3-fwd bf16'):6.0f} {g('vLLM FA3 FP8 varlen'):6.0f} {g('fa3-fwd FP8 varlen'):6.0f} {g('v2 host path'):6.0f}")


def time_rows(run: Run, rows: list[dict], case: "bench.AttentionCase", timed: list, min_left: float = 0.0,
              **extra) -> None:
    """Median-time each (provider, config label, fn) of `timed` on `case`; a row each (or its error),
    with `extra` fields added."""
    for tag, label, fn in timed:
        if run.left() < min_left:
            break
        t0 = time.time()
        try:
            ms = bench.median_ms(fn)
            rows.append(dict(section="speed", case=case.label(), head_dim=case.head_dim, seqlen=case.seqlen,
                             batch=case.batch, causal=case.causal, provider=tag, config=label, ms=ms,
                             tflops=bench.tflops(case.flops(), ms), compile_and_time_s=round(time.time() - t0, 1),
                             done_at=time.strftime("%Y/%m/%d %H:%M:%S"), **extra))
        except Exception as e:  # noqa: BLE001
            rows.append(dict(section="speed", case=case.label(), provider=tag, config=label, error=repr(e)[:300],
                             **extra))
        print(rows[-1], flush=True)


# ----------------------------------------------------------------------------------------
QUICK_CASES = [  # (head_dim, causal, batch, seqlen), weakest first; the last is the control
    (64, True, 4, 4096), (128, True, 4, 4096), (64, False, 4, 4096), (128, True, 2, 8192),
    (64, True, 1, 16384), (64, False, 1, 16384), (128, False, 1, 16384),
]


def quick_candidates(d: int, causal: bool) -> list[tuple[str, "A.AttentionConfig"]]:
    """The current default config and the remaining candidates for (head_dim, causal)."""
    return [("default", A._MEASURED_DEFAULTS[(d, causal)])] + [("candidate", c) for c in A.V4_CANDIDATES.get((d, causal), [])]


def quick(run: Run, prov: dict) -> None:
    """v2 against the v4 candidates against FA3 FP8 in one short run (--quick).

    First every candidate against the emulation on the GPU (1x2048x16 heads: the same
    integer specialisations as the timed shapes, so those compiles are shared; plus one
    ragged 2x203 causal case), then the weakest grid cases. JSON after every case.
    """
    from fp8lab.reference.exact import attention_exact
    from fp8lab.reference.fa3 import attention_fa3_fp8

    gen = torch.Generator(device="cuda").manual_seed(5)
    rows: list[dict] = []
    checks = [(d, c, 1, 2048, 16, 16) for d, c in dict.fromkeys((d, c) for d, c, _, _ in QUICK_CASES)]
    checks.append((64, True, 2, 203, 8, 2))
    for d, causal, b, s, hq, hk in checks:
        if run.left() < 0.6 * run.budget:  # keep most of the budget for the timings
            print("correctness checks stop early to leave time for the timings", flush=True)
            break
        q, k, v, qd, kd, vd = make_inputs(b, s, s, hq, hk, d, gen)
        vt = A.pretranspose_v(v)
        kw = dict(causal=causal)
        exact = attention_exact(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, **kw)
        emus: dict[int, torch.Tensor] = {}
        cands = quick_candidates(d, causal) if s == 2048 else [("candidate", c) for c in A.V4_CANDIDATES[(d, causal)][:1]]
        for tag, cfg in cands:
            t0 = time.time()
            name = f"{b}x{s}x{hq}/{hk}x{d}{' causal' if causal else ''}"
            try:
                if cfg.block_n not in emus:
                    emus[cfg.block_n] = attention_fa3_fp8(q, k, v, qd, kd, vd, block_n=cfg.block_n, **kw)
                emu = emus[cfg.block_n]
                out = A.fp8_attention(q, k, vt, qd, kd, vd, config=cfg, **kw)
                e_emu, e_exact = rel_l2(out, emu), rel_l2(emu, exact)
                rows.append(dict(section="correctness", case=name, version=tag, config=cfg.label(),
                                 ours_vs_emu=e_emu, emu_vs_exact=e_exact, ratio=e_emu / max(e_exact, 1e-30),
                                 finite=bool(torch.isfinite(out).all()), s=round(time.time() - t0, 1)))
            except Exception as e:  # noqa: BLE001
                rows.append(dict(section="correctness", case=name, version=tag, config=cfg.label(), error=repr(e)[:300]))
            print(rows[-1], flush=True)
        run.save("quick", rows)
        del q, k, v, vt, exact, emus

    cases = [bench.AttentionCase(b, s, 32, 32, d, causal) for d, causal, b, s in QUICK_CASES]
    for case, x in grid_inputs(run, cases, gen, "quick", min_left=8):
        timed = [(tag, cfg.label(), (lambda cfg=cfg: A.fp8_attention(x.q, x.k, x.vt, x.qd, x.kd, x.vd,
                                                                     causal=case.causal, config=cfg)))
                 for tag, cfg in quick_candidates(case.head_dim, case.causal)]
        timed += provider_timings(prov, x, case, gen, vllm=False)
        time_rows(run, rows, case, timed, min_left=4)
        run.save("quick", rows)


def ws_candidates(d: int, causal: bool) -> list:
    """v9: the v8 default of each case with FA3's two scheduling details on top (ping-pong ordering
    of the consumers' MMAs, -pp; O's rescale under the next QK^T, -ru), and FA3's wider key
    blocks where they compile without spills (offline sm_90 compiles: 256 keys at d=64, 128 at d=256)."""
    import dataclasses

    from fp8lab.kernels import attention_ws as W

    base = W.default_ws_config(d, causal)
    out = [dataclasses.replace(base, pingpong=pp, rescale_under_mma=ru) for pp in (False, True) for ru in (False, True)]
    wide = {64: [(256, 2, False, False), (256, 3, False, True), (256, 3, True, True)],
            128: [(128, 2, False, True)],
            256: [(128, 2, False, False), (128, 2, False, True), (128, 2, True, True)]}[d]
    return out + [W.WsConfig(block_n=bn, stages=st, pingpong=pp, rescale_under_mma=ru) for bn, st, pp, ru in wide]


def ws(run: Run, prov: dict, dims: tuple[int, ...] = (64, 128, 256)) -> None:
    """v8/v9: the warp-specialized Gluon kernel (`fp8lab.kernels.attention_ws`), --ws.

    Correctness first: every candidate against the emulation with the same block_n, and against
    the Triton kernel with the same block sizes, on a ragged GQA shape and a 2k shape; stride-0
    and materialized descales must give the same bits. Then the grid: each candidate, the Triton
    default, fa3-fwd FP8 and vLLM's FA3 FP8 varlen path on the same inputs.
    """
    from fp8lab.kernels import attention_ws as W
    from fp8lab.reference.fa3 import attention_fa3_fp8

    gen = torch.Generator(device="cuda").manual_seed(8)
    rows: list[dict] = []
    for name, causal, (q, k, v, qd, kd, vd), vt, exact in check_inputs(dims, gen):
        d = q.shape[-1]
        for cfg in ws_candidates(d, causal):
            bn = cfg.block_n
            t0 = time.time()
            try:
                emu = attention_fa3_fp8(q, k, v, qd, kd, vd, block_n=bn, causal=causal)
                out, lse = W.fp8_attention_ws(q, k, vt, q_descale=qd, k_descale=kd, v_descale=vd,
                                              causal=causal, config=cfg)
                tri = A.fp8_attention(q, k, vt, qd, kd, vd, causal=causal,
                                      config=A.AttentionConfig(cfg.block_m, bn, 8, 2))
                qd0 = qd[:1, :1].expand_as(qd)
                o1, _ = W.fp8_attention_ws(q, k, vt, q_descale=qd0, k_descale=kd, v_descale=vd,
                                           causal=causal, config=cfg)
                o2, _ = W.fp8_attention_ws(q, k, vt, q_descale=qd0.contiguous(), k_descale=kd,
                                           v_descale=vd, causal=causal, config=cfg)
                e_emu, e_exact = rel_l2(out, emu), rel_l2(emu, exact)
                rows.append(dict(section="correctness", case=name, config=cfg.label(), ours_vs_emu=e_emu,
                                 emu_vs_exact=e_exact, ratio=e_emu / max(e_exact, 1e-30),
                                 ws_vs_triton=rel_l2(out, tri), same_bits_as_triton=float((out == tri).float().mean()),
                                 stride0_bitwise=bool(torch.equal(o1, o2)), finite=bool(torch.isfinite(out).all()),
                                 lse_finite_rows=int(torch.isfinite(lse).sum()), s=round(time.time() - t0, 1)))
            except Exception as e:  # noqa: BLE001
                rows.append(dict(section="correctness", case=name, config=cfg.label(), error=repr(e)[:400]))
            print(rows[-1], flush=True)
        run.save("ws", rows)

    for case, x in grid_inputs(run, (c for c in bench.bench_grid() if c.head_dim in dims), gen, "ws"):
        causal = case.causal
        timed = [("ws", cfg.label(), (lambda cfg=cfg: W.fp8_attention_ws(
                      x.q, x.k, x.vt, q_descale=x.qd, k_descale=x.kd, v_descale=x.vd, causal=causal, config=cfg)))
                 for cfg in ws_candidates(case.head_dim, causal)]
        cfg0 = A.default_config(case.head_dim, causal)
        timed.append(("default", cfg0.label(), lambda: A.fp8_attention(x.q, x.k, x.vt, x.qd, x.kd, x.vd,
                                                                       causal=causal, config=cfg0)))
        timed += provider_timings(prov, x, case, gen)
        time_rows(run, rows, case, timed)
        run.save("ws", rows)


def ws_summary(run: Run) -> None:
    rows = run.sections.get("ws", [])
    report_checks("ws", rows, bound=0.6)
    by_case: dict[str, dict[str, float]] = {}
    for r in rows:
        if r.get("section") == "speed" and "tflops" in r:
            key = r["config"] if r["provider"] == "ws" else r["provider"]
            by_case.setdefault(r["case"], {})[key] = r["tflops"]
    print("ratios to fa3-fwd FP8 in the same run (TFLOP/s of FA3 FP8 last)")
    for case, d in by_case.items():
        fa3 = d.get("fa3-fwd FP8", float("nan"))
        cols = "  ".join(f"{c}={t / fa3:.2f}" for c, t in d.items() if c.startswith("ws-"))
        print(f"{case:<24} triton={d.get('default', float('nan')) / fa3:.2f}  {cols}  "
              f"vllm={d.get('vLLM FA3 FP8 varlen', float('nan')) / fa3:.2f}  fa3={fa3:.0f}")


# v10 (sixth session). Offline sm_90 compiles (triton 3.6), no GPU:
# - the causal mask as one compare per score: the on-band loop loses 18-24 % of its instructions
#   at the causal defaults, non-causal builds are byte-identical, and block_n 128 at head dim 128
#   causal no longer spills (stack 1048 -> 96 bytes), so the non-causal tile is a causal candidate;
# - `permute_keys` (-pk): K's rows loaded in the order that turns P's shuffle into a register
#   renaming; the off-band loop loses 5-12 % of its instructions (no SHFL.IDX/SEL/PRMT left).
# The two exploration runs (bench_v10_explore*.json) timed, besides the default: -pk versions of
# the v9 defaults, m64n128w4s{3,4}-r168-pk, m128n128w4s{3,4}-pk (64), m128n128w{4,8}s3(-pk),
# m64n128w4s3-pk, m128n64w4s3-pk (128), m128n64w8s{3,4}-pk, m128n64w8s3-pq-pk (256). What follows
# is the confirmation run's list: each case's runner-up next to the new defaults.
V10_CANDIDATES: dict[tuple[int, bool], list[str]] = {
    (64, False): ["m64n128w4s4-r168-pk"],
    (64, True): ["m64n128w4s3-r168-pk"],  # the default until the check run (bench_v10_check64)
    (128, False): ["m128n128w4s3-pk"],
    (128, True): ["m128n64w4s3-pk"],
    (256, False): [],
    (256, True): [],
}


# v11 (seventh session): the Gluon kernel's main loop, read offline (triton 3.6 sm_90 SASS). At d=128
# it was 826 instructions per 128-key block and consumer, 253 of them PRMT/LOP3/SHFL.IDX/SEL: P was
# cast to e4m3 at the end of the softmax and carried across the loop's back edge as one byte per
# register, then repacked byte by byte before its MMA. Casting next to the MMA: 638 (d=64 785 -> 604,
# d=256 884 -> 713 with a few spills). With V^T in key order (`key_ordered_vt`) P's conversion moves no
# register: 589 (d=64 555, d=256 663). The same loop of the Triton kernel is 494 for 64 rows.
V11_WS_CANDIDATES: dict[tuple[int, bool], list[str]] = {}  # --ws-candidates: labels per (head dim, causal)


def _wc(label: str) -> tuple["object", bool]:
    """(WsConfig, key-ordered V) from a label like 'ws-n64s4-pp-ru-kv' (WsConfig.label, then -kv)."""
    import re

    from fp8lab.kernels import attention_ws as W

    m = re.fullmatch(r"ws-n(\d+)s(\d+)((?:-[a-z0-9]+)*)", label)
    if not m:
        raise ValueError(f"ws config label: expected like 'ws-n128s3-pp-kv', got {label!r}")
    opts = m.group(3).split("-")
    return W.WsConfig(block_n=int(m.group(1)), stages=int(m.group(2)), pingpong="pp" in opts,
                      rescale_under_mma="ru" in opts, pack_p="pw" in opts, consumers=3 if "c3" in opts else 2,
                      persistent="ps" in opts, dynamic="dy" in opts), "kv" in opts


def v11_ws_candidates(d: int, causal: bool) -> list[tuple[str, "object", bool]]:
    """(tag, WsConfig, key-ordered V) for --v11: the defaults for plain and for key-ordered V^T,
    the key-ordered default with P in float32 (pack_p off, where it is on), and at 256 the 64-key
    tile with key-ordered V; or what --ws-candidates names for the case."""
    import dataclasses

    from fp8lab.kernels import attention_ws as W

    if (d, causal) in V11_WS_CANDIDATES:
        return [("ws", *_wc(label)) for label in V11_WS_CANDIDATES[(d, causal)]]
    keyed = W.default_ws_config(d, causal, key_ordered=True)
    out = [("ws", W.default_ws_config(d, causal), False), ("ws", keyed, True),
           ("ws", dataclasses.replace(keyed, pack_p=False), True)]
    if d == 256:
        out += [("ws", W.WsConfig(block_n=64, stages=4), True)]
    return list(dict.fromkeys(out))  # duplicates where the defaults coincide


def v11(run: Run, prov: dict, dims: tuple[int, ...] = (64, 128, 256), repeats: int = 3,
        old_version: str = "v10") -> None:
    """--v11: the Gluon kernel's candidates against an earlier version's Gluon kernel
    (`fp8lab/kernels/_<old_version>_attention_ws.py`, copied from that version's commit by the
    session command: v10 7675c3e, v11 099d169), the Triton default, fa3-fwd FP8 and vLLM,
    `repeats` interleaved rounds per case. The old kernel runs its default and, where it has
    `pack_p`, each packed candidate's config; the same bits are expected from both."""
    import dataclasses

    from fp8lab.kernels import attention_ws as W
    from fp8lab.reference.fa3 import attention_fa3_fp8

    old = _old_module(old_version, "attention_ws")

    def old_config(cfg):
        """cfg as the old kernel's WsConfig, or None where cfg sets a field it lacks (persistent: the
        same bits are expected from one program per tile, so the old kernel's run of that config)."""
        cfg = dataclasses.replace(cfg, persistent=False, dynamic=False)
        fields = {k: v for k, v in dataclasses.asdict(cfg).items() if k in old.WsConfig.__dataclass_fields__}
        return old.WsConfig(**fields) if W.WsConfig(**fields) == cfg else None

    def old_configs(d: int, causal: bool) -> list:
        """The old kernel's configs to run: its default, and the packed candidates it can run."""
        if old is None:
            return []
        packed = [old_config(cfg) for _, cfg, keyed in v11_ws_candidates(d, causal) if cfg.pack_p and keyed]
        return [None] + list(dict.fromkeys(c for c in packed if c is not None))
    gen = torch.Generator(device="cuda").manual_seed(11)
    rows: list[dict] = []
    for name, causal, (q, k, v, qd, kd, vd), vt, exact in check_inputs(dims, gen):
        d = q.shape[-1]
        kv = W.key_ordered_vt(v)
        refs = {}  # the old kernel's output per config (None: its default, plain V^T)
        for ocfg in old_configs(d, causal):
            refs[ocfg] = old.fp8_attention_ws(q, k, vt if ocfg is None else old.key_ordered_vt(v), q_descale=qd,
                                              k_descale=kd, v_descale=vd, causal=causal, config=ocfg)
        for tag, cfg, keyed in v11_ws_candidates(d, causal):
            label = cfg.label() + "-kv" * keyed
            try:
                emu = attention_fa3_fp8(q, k, v, qd, kd, vd, block_n=cfg.block_n, causal=causal)
                out, lse = W.fp8_attention_ws(q, k, kv if keyed else vt, q_descale=qd, k_descale=kd, v_descale=vd,
                                              causal=causal, config=cfg)
                e_emu, e_exact = rel_l2(out, emu), rel_l2(emu, exact)
                row = dict(section="correctness", case=name, version=tag, config=label, ours_vs_emu=e_emu,
                           emu_vs_exact=e_exact, ratio=e_emu / max(e_exact, 1e-30),
                           finite=bool(torch.isfinite(out).all()))
                ref = next((o for c, o in refs.items() if (c is None and cfg == W.default_ws_config(d, causal))
                            or (c is not None and keyed and c == old_config(cfg))), None)
                if ref is not None:
                    row.update({f"same_bits_as_{old_version}": bool(torch.equal(out, ref[0]) and torch.equal(lse, ref[1])),
                                "out_bits_differing": float((out != ref[0]).float().mean())})
                if cfg.pack_p:  # packing P is a change of representation only: the same bits as float32 P
                    o32, l32 = W.fp8_attention_ws(q, k, kv, q_descale=qd, k_descale=kd, v_descale=vd, causal=causal,
                                                  config=dataclasses.replace(cfg, pack_p=False))
                    row.update(same_bits_as_unpacked=bool(torch.equal(out, o32) and torch.equal(lse, l32)))
            except Exception as e:  # noqa: BLE001
                row = dict(section="correctness", case=name, version=tag, config=label, error=repr(e)[:300])
            rows.append(row)
            print(row, flush=True)
        run.save("v11", rows)

    for case, x in grid_inputs(run, bench.bench_grid(head_dims=dims), gen, "v11"):
        d, causal = case.head_dim, case.causal
        kv = W.key_ordered_vt(x.v)

        def gluon(mod, cfg, v):
            return lambda: mod.fp8_attention_ws(x.q, x.k, v, q_descale=x.qd, k_descale=x.kd, v_descale=x.vd,
                                                causal=causal, config=cfg)

        cfg0 = A.default_config(d, causal)
        timed = [("default", cfg0.label(), lambda: A.fp8_attention(x.q, x.k, x.vt, x.qd, x.kd, x.vd, causal=causal,
                                                                  config=cfg0))]
        timed += [(tag, cfg.label() + "-kv" * keyed, gluon(W, cfg, kv if keyed else x.vt))
                  for tag, cfg, keyed in v11_ws_candidates(d, causal)]
        for ocfg in old_configs(d, causal):
            label = (ocfg or old.default_ws_config(d, causal)).label() + "-kv" * (ocfg is not None)
            timed.append((f"{old_version} ws", label, gluon(old, ocfg, x.vt if ocfg is None else old.key_ordered_vt(x.v))))
        timed += provider_timings(prov, x, case, gen)
        for rep in range(repeats):
            time_rows(run, rows, case, timed, min_left=5, rep=rep)
            run.save("v11", rows)


def v11_summary(run: Run) -> None:
    rows = run.sections.get("v11", [])
    report_checks("v11", rows, also_bad=lambda r: any(v is False for k, v in r.items() if k.startswith("same_bits_as_")))
    print_round_medians(rows)


def set_candidates(spec: str, table: dict | None = None, parse=None) -> None:
    """--candidates (--ws-candidates): 'D[c]:LABEL,...' replaces V10_CANDIDATES' (V11_WS_CANDIDATES')
    lists for the (D, causal) named."""
    table = V10_CANDIDATES if table is None else table
    new: dict[tuple[int, bool], list[str]] = {}
    for item in filter(None, spec.split(",")):
        key, _, label = item.partition(":")
        (parse or _c)(label)  # a bad label fails here, before any device time is spent
        new.setdefault((int(key.rstrip("c")), key.endswith("c")), []).append(label)
    table.update(new)


def _old_module(version: str, name: str):
    """An earlier version's kernel module (`fp8lab/kernels/_<version>_<name>.py`, copied in by the
    session command: v9's from commit bf5b2c4, v10's from 7675c3e) to time against in the same run;
    None when absent."""
    import importlib

    try:
        return importlib.import_module(f"fp8lab.kernels._{version}_{name}")
    except ImportError as e:
        print(f"{version} {name} not found ({e}); timing only the current kernels", flush=True)
        return None


def v10_candidates(d: int, causal: bool) -> list[tuple[str, "A.AttentionConfig"]]:
    default = A.default_config(d, causal)
    return [("default", default)] + [("v10", c) for c in map(_c, V10_CANDIDATES[(d, causal)]) if c != default]


def v10(run: Run, prov: dict, dims: tuple[int, ...] = (64, 128, 256), repeats: int = 3) -> None:
    """--v10: the one-compare causal mask and `permute_keys` against v9's kernels, same inputs.

    Correctness first: every candidate against the emulation, and against v9's kernel with the
    same blocks (without -pk the same bits are expected: the mask keeps the same keys; with -pk
    only the order of the row sum's additions may differ). Then the grid, `repeats` interleaved
    rounds of: the default, the v10 candidates, v9's default (v9's kernel), at 256 the Gluon kernel
    (and v9's, causal), fa3-fwd FP8 and vLLM's varlen path.
    """
    import dataclasses

    from fp8lab.kernels import attention_ws as W
    from fp8lab.reference.fa3 import attention_fa3_fp8

    old, old_ws = _old_module("v9", "attention"), _old_module("v9", "attention_ws")
    gen = torch.Generator(device="cuda").manual_seed(10)
    rows: list[dict] = []
    for name, causal, (q, k, v, qd, kd, vd), vt, exact in check_inputs(dims, gen):
        d = q.shape[-1]
        emus: dict[int, torch.Tensor] = {}
        for tag, cfg in v10_candidates(d, causal):
            try:
                if cfg.block_n not in emus:
                    emus[cfg.block_n] = attention_fa3_fp8(q, k, v, qd, kd, vd, block_n=cfg.block_n,
                                                          causal=causal)
                out, lse = A.fp8_attention(q, k, vt, qd, kd, vd, config=cfg, causal=causal, return_lse=True)
                e_emu, e_exact = rel_l2(out, emus[cfg.block_n]), rel_l2(emus[cfg.block_n], exact)
                row = dict(section="correctness", case=name, version=tag, config=cfg.label(),
                           ours_vs_emu=e_emu, emu_vs_exact=e_exact, ratio=e_emu / max(e_exact, 1e-30),
                           finite=bool(torch.isfinite(out).all()))
                if old is not None:
                    o9, l9 = old.fp8_attention(q, k, vt, qd, kd, vd, causal=causal, return_lse=True,
                                               config=dataclasses.replace(cfg, permute_keys=False))
                    row.update(same_bits_as_v9=bool(torch.equal(out, o9) and torch.equal(lse, l9)),
                               vs_v9=rel_l2(out, o9), out_bits_differing=float((out != o9).float().mean()))
            except Exception as e:  # noqa: BLE001
                row = dict(section="correctness", case=name, version=tag, config=cfg.label(),
                           error=repr(e)[:300])
            rows.append(row)
            print(row, flush=True)
        try:  # the Gluon kernel (its mask changed too)
            cfg = W.default_ws_config(d, causal)
            out, lse = W.fp8_attention_ws(q, k, vt, q_descale=qd, k_descale=kd, v_descale=vd, causal=causal)
            emu = attention_fa3_fp8(q, k, v, qd, kd, vd, block_n=cfg.block_n, causal=causal)
            row = dict(section="correctness", case=name, version="ws", config=cfg.label(),
                       ours_vs_emu=rel_l2(out, emu), emu_vs_exact=rel_l2(emu, exact),
                       ratio=rel_l2(out, emu) / max(rel_l2(emu, exact), 1e-30))
            if old_ws is not None:
                o9, l9 = old_ws.fp8_attention_ws(q, k, vt, q_descale=qd, k_descale=kd, v_descale=vd,
                                                 causal=causal)
                row.update(same_bits_as_v9=bool(torch.equal(out, o9) and torch.equal(lse, l9)))
        except Exception as e:  # noqa: BLE001
            row = dict(section="correctness", case=name, version="ws", error=repr(e)[:300])
        rows.append(row)
        print(row, flush=True)
        run.save("v10", rows)

    for case, x in grid_inputs(run, bench.bench_grid(head_dims=dims), gen, "v10"):
        d, causal = case.head_dim, case.causal

        def tri(mod, cfg):
            return lambda: mod.fp8_attention(x.q, x.k, x.vt, x.qd, x.kd, x.vd, causal=causal, config=cfg)

        def gluon(mod):
            return lambda: mod.fp8_attention_ws(x.q, x.k, x.vt, q_descale=x.qd, k_descale=x.kd, v_descale=x.vd,
                                                causal=causal)

        timed = [(tag, cfg.label(), tri(A, cfg)) for tag, cfg in v10_candidates(d, causal)]
        if old is not None:
            cfg9 = old.default_config(d, causal)
            timed.append(("v9 default", cfg9.label(), tri(old, cfg9)))
        if d == 256:
            timed.append(("ws", W.default_ws_config(d, causal).label(), gluon(W)))
            if old_ws is not None and causal:
                timed.append(("v9 ws", W.default_ws_config(d, causal).label(), gluon(old_ws)))
        timed += provider_timings(prov, x, case, gen)
        for rep in range(repeats):
            time_rows(run, rows, case, timed, min_left=5, rep=rep)
            run.save("v10", rows)


def v10_grid(run: Run, prov: dict, name: str = "v10_grid", ws_dims: tuple[int, ...] = (256,),
             key_ordered: bool = False) -> None:
    """--v10-grid / --v11-grid: the grid with every provider in one run, one median each, in the grid
    schema (notebook 07): the Triton default ("fp8lab"), the Gluon kernel at `ws_dims` ("fp8lab ws";
    with V^T from `key_ordered_vt` when `key_ordered`, label -kv), fa3-fwd FP8 batched and varlen,
    vLLM's FP8 varlen path and fa3-fwd bf16."""
    from fp8lab.kernels import attention_ws as W

    gen = torch.Generator(device="cuda").manual_seed(11)
    rows: list[dict] = []
    for case, x in grid_inputs(run, bench.bench_grid(), gen, name):
        d, causal = case.head_dim, case.causal
        cfg = A.default_config(d, causal)
        timed = [("fp8lab", cfg.label(), lambda: A.fp8_attention(x.q, x.k, x.vt, x.qd, x.kd, x.vd, causal=causal))]
        if d in ws_dims:
            v = W.key_ordered_vt(x.v) if key_ordered else x.vt
            timed.append(("fp8lab ws", W.default_ws_config(d, causal, key_ordered).label() + "-kv" * key_ordered,
                          lambda: W.fp8_attention_ws(x.q, x.k, v, q_descale=x.qd, k_descale=x.kd, v_descale=x.vd,
                                                     causal=causal)))
        timed += provider_timings(prov, x, case, gen, fa3_varlen=True, bf16=True)
        time_rows(run, rows, case, timed, min_left=3)
        run.save(name, rows)


def rounds_grid(run: Run, prov: dict, name: str = "v23", rounds: int = 5, settle_s: float = 1.5) -> None:
    """--v23-grid: --v11-grid's providers and configs, timed by `bench.interleaved_times`: per case,
    every provider once, then all in turn for `settle_s` seconds, then `rounds` rounds in rotated
    order. Writes every timing to bench_<name>_rounds.json and the medians over the rounds, in the
    grid schema, to bench_<name>_grid.json."""
    from fp8lab.kernels import attention_ws as W

    gen = torch.Generator(device="cuda").manual_seed(11)
    raw: list[dict] = []
    for case, x in grid_inputs(run, bench.bench_grid(), gen, name, min_left=20):
        d, causal = case.head_dim, case.causal
        v = W.key_ordered_vt(x.v)
        timed = [("fp8lab", A.default_config(d, causal).label(),
                  lambda: A.fp8_attention(x.q, x.k, x.vt, x.qd, x.kd, x.vd, causal=causal)),
                 ("fp8lab ws", W.default_ws_config(d, causal, True).label() + "-kv",
                  lambda: W.fp8_attention_ws(x.q, x.k, v, q_descale=x.qd, k_descale=x.kd, v_descale=x.vd,
                                             causal=causal))]
        timed += provider_timings(prov, x, case, gen, fa3_varlen=True, bf16=True)
        labels = {tag: label for tag, label, _ in timed}
        meta = dict(section="speed", case=case.label(), head_dim=d, seqlen=case.seqlen, batch=case.batch,
                    causal=causal)
        for r in bench.interleaved_times({tag: fn for tag, _, fn in timed}, rounds, settle_s,
                                         sync=torch.cuda.synchronize):
            extra = dict(tflops=bench.tflops(case.flops(), r["ms"])) if "ms" in r else {}
            raw.append(dict(meta, config=labels[r["provider"]], **r, **extra))
        medians = bench.median_over_rounds([row for row in raw if row["case"] == case.label()])
        print(case.label(), " ".join(f"{g['provider']}={g['tflops']:.0f}" for g in medians if "tflops" in g), flush=True)
        run.save(f"{name}_rounds", raw, rounds=rounds, settle_s=settle_s)
        run.save(f"{name}_grid", bench.median_over_rounds(raw), rounds=rounds, settle_s=settle_s)


def api_grid(run: Run, prov: dict, rounds: int = 5, settle_s: float = 1.5) -> None:
    """--api-grid: the grid through the kit's public call, `fp8lab.attention`, V in FA3's layout as
    a user has it, timed as --v23-grid: backend "triton" (on Hopper the Gluon kernel, V stored by
    `key_ordered_vt` in each call), "triton:triton" (the Triton kernel, V transposed in its tiles)
    and "fa3:fa3-fwd", all paying the API's checks (descale values: device syncs); against them
    the two kernels called directly on prepared inputs (Gluon on a `key_ordered_vt` made once) and
    fa3-fwd called directly. Writes bench_api_rounds.json and bench_api_grid.json."""
    import fp8lab
    from fp8lab.backends import api
    from fp8lab.kernels import attention_ws as W

    gen = torch.Generator(device="cuda").manual_seed(11)
    raw: list[dict] = []
    for case, x in grid_inputs(run, bench.bench_grid(), gen, "api", min_left=20):
        d, causal = case.head_dim, case.causal
        kov = W.key_ordered_vt(x.v)
        ds = dict(q_descale=x.qd, k_descale=x.kd, v_descale=x.vd)
        chosen = api.choose_backend(x.q, x.k, x.v, backend="triton", **ds).label()

        def through_api(backend: str):
            return lambda: fp8lab.attention(x.q, x.k, x.v, causal=causal, backend=backend, **ds)

        timed = {f"api triton ({chosen})": through_api("triton"), "api triton:triton": through_api("triton:triton"),
                 "fp8lab ws": lambda: W.fp8_attention_ws(x.q, x.k, kov, causal=causal, **ds),
                 "fp8lab": lambda: A.fp8_attention(x.q, x.k, x.vt, x.qd, x.kd, x.vd, causal=causal)}
        if "fa3" in prov:
            timed["api fa3:fa3-fwd"] = through_api("fa3:fa3-fwd")
        timed.update({tag: fn for tag, _, fn in provider_timings(prov, x, case, gen, vllm=False)})
        meta = dict(section="speed", case=case.label(), head_dim=d, seqlen=case.seqlen, batch=case.batch,
                    causal=causal, config="")
        for r in bench.interleaved_times(timed, rounds, settle_s, sync=torch.cuda.synchronize):
            extra = dict(tflops=bench.tflops(case.flops(), r["ms"])) if "ms" in r else {}
            raw.append(dict(meta, **r, **extra))
        medians = bench.median_over_rounds([row for row in raw if row["case"] == case.label()])
        print(case.label(), " | ".join(f"{g['provider']}={g['tflops']:.0f}" if "tflops" in g else
                                       f"{g['provider']}: {g.get('error')}" for g in medians), flush=True)
        run.save("api_rounds", raw, rounds=rounds, settle_s=settle_s)
        run.save("api_grid", bench.median_over_rounds(raw), rounds=rounds, settle_s=settle_s)


def api_grid_summary(run: Run) -> None:
    rows = [x for x in run.sections.get("api_grid", []) if "tflops" in x]
    fa3 = {r["case"]: r["tflops"] for r in rows if r["provider"] == "fa3-fwd FP8"}
    api_fa3 = {r["case"]: r["tflops"] for r in rows if r["provider"] == "api fa3:fa3-fwd"}
    print("\nTFLOP/s; (x) = ratio to fa3-fwd FP8 called directly; [x] = ratio to fa3-fwd through the API")
    for r in rows:
        f, g = fa3.get(r["case"]), api_fa3.get(r["case"])
        print(f"{r['case']:<24} {r['provider']:<28} {r['tflops']:7.0f}" + (f"  ({r['tflops'] / f:.3f})" if f else "")
              + (f"  [{r['tflops'] / g:.3f}]" if g else ""))


def v10_grid_summary(run: Run, name: str = "v10_grid") -> None:
    rows = [x for x in run.sections.get(name, []) if "tflops" in x]
    print("\ncase                      fp8lab   ws  FA3fp8  ratio  fa3vl  vLLM  bf16   (ratio: the faster fp8lab kernel)")
    for r in bench.ratio_table(rows, "fp8lab", "fa3-fwd FP8"):
        g = {x["provider"]: x["tflops"] for x in rows if x["case"] == r["case"]}
        best = max(r["fp8lab"], g.get("fp8lab ws", 0))
        print(f"{r['case']:<24} {r['fp8lab']:7.0f} {g.get('fp8lab ws', 0):5.0f} {r['fa3-fwd FP8']:6.0f} "
              f"{best / r['fa3-fwd FP8']:5.2f} {g.get('fa3-fwd FP8 varlen', 0):6.0f} "
              f"{g.get('vLLM FA3 FP8 varlen', 0):5.0f} {g.get('fa3-fwd bf16', 0):5.0f}")


def print_round_medians(rows: list[dict]) -> None:
    """Per case, each provider's (and config's) median TFLOP/s over the interleaved rounds."""
    import statistics

    by_case: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        if r.get("section") == "speed" and "tflops" in r:
            key = r["provider"] + ("" if r["provider"] in ("fa3-fwd FP8", "vLLM FA3 FP8 varlen") else ":" + r["config"])
            by_case.setdefault(r["case"], {}).setdefault(key, []).append(r["tflops"])
    print("median TFLOP/s over the rounds; x = ratio to fa3-fwd FP8")
    for case, d in by_case.items():
        med = {k: statistics.median(v) for k, v in d.items()}
        fa3 = med.get("fa3-fwd FP8", float("nan"))
        print(f"{case:<24} " + "  ".join(f"{k}={t:.0f} ({t / fa3:.2f}x)" for k, t in med.items()))


def v10_summary(run: Run) -> None:
    rows = run.sections.get("v10", [])
    report_checks("v10", rows, also_bad=lambda r: r.get("same_bits_as_v9") is False
                  and not r.get("config", "").endswith("-pk"))
    print_round_medians(rows)


def _loop_stats(sass: str) -> list[dict]:
    """Per loop (a backward branch) with wgmma in it: instructions and the interesting kinds."""
    import re

    lines = sass.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := re.match(r"^(\.L_x_\d+):", line))}
    loops = []
    for i, line in enumerate(lines):
        m = re.search(r"BRA `\((\.L_x_\d+)\)", line)
        if m and labels.get(m.group(1), i + 1) < i:
            body = [x for x in lines[labels[m.group(1)]:i + 1] if re.search(r"/\*[0-9a-f]{4}\*/", x)]
            count = lambda pat: sum(1 for x in body if re.search(pat, x))  # noqa: E731
            if count("GMMA"):
                loops.append(dict(instr=len(body), stl=count(r"\bSTL"), ldl=count(r"\bLDL"), mufu=count("MUFU"),
                                  gmma=count("GMMA"), gmma_waits=count(r"WARPGROUP\.DEPBAR"),
                                  p_shuffle=count(r"\b(SHFL\.IDX|SEL|PRMT)\b"),
                                  p_pack=count(r"\b(SHFL\.IDX|SEL|PRMT|LOP3\.LUT)\b")))
    return loops


def inspect_configs() -> list[tuple[int, bool, str, "A.AttentionConfig"]]:
    """What --inspect compiles: each (head_dim, causal) default, and the same with `permute_keys`
    toggled (v10: the P shuffle, SHFL.IDX + SEL + PRMT, disappears with it)."""
    import dataclasses

    out = []
    for d in (64, 128, 256):
        for causal in (False, True):
            cfg = A._MEASURED_DEFAULTS[(d, causal)]
            out.append((d, causal, "default", cfg))
            out.append((d, causal, "pk toggled", dataclasses.replace(cfg, permute_keys=not cfg.permute_keys)))
    return out


def _cubin_usage_and_sass(cubin: bytes) -> tuple[str, str]:
    """cuobjdump's resource usage (registers, stack) and nvdisasm's SASS of a compiled cubin, with the
    tools bundled in this Triton."""
    import subprocess
    import tempfile

    import triton

    bindir = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        def run_tool(*cmd) -> str:
            return subprocess.run([str(c) for c in cmd], capture_output=True, text=True).stdout

        return run_tool(bindir / "cuobjdump", "--dump-resource-usage", path), run_tool(bindir / "nvdisasm", "-c", path)


def inspect_offline(out: Path, configs: list | None = None, with_ws: bool = True) -> None:
    """Compile the defaults with and without `permute_keys` for sm_90 on any host (no GPU) and
    report registers, stack (spills), each loop's instruction mix (with the P shuffle's
    SHFL.IDX/SEL/PRMT count) and ptxas' wgmma-serialization notes; then the Gluon kernel's
    defaults with plain and key-ordered V^T (`inspect_ws_offline`).

    The shapes are specialised as the benchmark's (strides divisible by 16, V pre-transposed
    so its key stride is 1). Use the GPU host's Triton (3.6) for its code generation and ptxas.
    """
    import inspect as pyinspect
    import re
    import subprocess
    import tempfile

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    bindir = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    kern = A._fp8_attention_fwd
    params = list(pyinspect.signature(kern.fn).parameters)
    ptr = dict(Q="*fp8e4nv", K="*fp8e4nv", V="*fp8e4nv", O="*bf16", LSE="*fp32", Q_DESCALE="*fp32",
               K_DESCALE="*fp32", V_DESCALE="*fp32", CU_SEQLENS_Q="*i32", CU_SEQLENS_K="*i32")
    unit_strides = ("stride_vs", "stride_ls", "stride_qdh", "stride_kdh", "stride_vdh")  # == 1: constexpr
    rows = []
    for d, causal, tag, cfg in configs or inspect_configs():
        const = dict(GROUP=1, HEAD_DIM=d, HEAD_DIM_PAD=d, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                     CAUSAL=causal, VARLEN=False, USE_TMA=False, V_TRANSPOSED=True,
                     WARP_SPECIALIZE=cfg.warp_specialize, MAX_OFFSET=A.FA3_MAX_OFFSET,
                     MASKED_STAGES=cfg.masked_stages or None, PIPELINE_QK=cfg.pipeline_qk,
                     PERMUTE_KEYS=cfg.permute_keys, PV_FLUSH=cfg.pv_flush, ROUND_IN_FP32=False,
                     **dict.fromkeys(unit_strides, 1))
        sig = {p: "constexpr" if p in const else ptr.get(p, "fp32" if p == "softmax_scale_log2" else "i32")
               for p in params}
        attrs = {(i,): [["tt.divisibility", 16]] for i, p in enumerate(params) if sig[p] not in ("constexpr", "fp32")}
        opts = dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages,
                    **({"maxnreg": cfg.maxnreg} if cfg.maxnreg else {}))
        t0 = time.time()
        k = triton.compile(ASTSource(kern, sig, const, attrs), target=GPUTarget("cuda", 90, 128), options=opts)
        usage, sass = _cubin_usage_and_sass(k.asm["cubin"])
        with tempfile.TemporaryDirectory() as tmp:
            ptx = Path(tmp) / "k.ptx"
            ptx.write_text(k.asm["ptx"])
            sh = lambda *cmd: subprocess.run([str(c) for c in cmd], capture_output=True, text=True)  # noqa: E731
            notes = ""
            for ptxas in ("ptxas-blackwell", "ptxas"):  # the one that reads this PTX version
                r = sh(bindir / ptxas, "-arch=sm_90a", "-v", ptx, "-o", Path(tmp) / "x.cubin")
                if r.returncode == 0:
                    notes = r.stdout + r.stderr
                    break
        reg = re.search(r"REG:(\d+) STACK:(\d+)", usage)
        ser = re.search(r"serialized due to ([a-z ]+?) in the function", notes)
        loops = _loop_stats(sass)
        row = dict(head_dim=d, causal=causal, version=tag, config=cfg.label(),
                   regs=int(reg.group(1)) if reg else None, stack_bytes=int(reg.group(2)) if reg else None,
                   shared_bytes=k.metadata.shared, wgmma_serialized=ser.group(1) if ser else None,
                   on_band=loops[0] if len(loops) > 1 else None, off_band=loops[-1] if loops else None,
                   compile_s=round(time.time() - t0, 1))
        rows.append(row)
        off = row["off_band"] or {}
        print(f"d={d:<3} {'causal' if causal else 'full':<6} {tag} {row['config']:<20} regs {row['regs']} "
              f"stack {row['stack_bytes']} smem {row['shared_bytes']} off-band instr {off.get('instr')} "
              f"STL {off.get('stl')} LDL {off.get('ldl')} P shuffle {off.get('p_shuffle')} "
              f"serialized: {row['wgmma_serialized'] or 'no'}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    if with_ws:
        rows += inspect_ws_offline()
    (out / "inspect_sm90.json").write_text(json.dumps(dict(triton=triton.__version__, rows=rows), indent=1))


def inspect_ws_offline() -> list[dict]:
    """--inspect, the Gluon kernel: each (head dim, causal) default compiled for sm_90 with plain
    and key-ordered V^T (v11), and the consumer's main loop counted: instructions per key block,
    P's packing and shuffles (PRMT, LOP3, SHFL.IDX, SEL; the loop's masked branch included) and
    local-memory traffic. v10's loop is commit 7675c3e's `attention_ws.py` compiled the same way."""
    import re

    from fp8lab.kernels import attention_ws as W

    rows = []
    for d in (64, 128, 256):
        for causal in (False, True):
            for keyed in (False, True):
                cfg = W.default_ws_config(d, causal, keyed)
                compiled = W.compile_ws_sm90(d, causal, cfg, permute_keys=keyed)
                usage, sass = _cubin_usage_and_sass(compiled.asm["cubin"])
                stack = re.search(r"STACK:(\d+)", usage)
                loop = _loop_stats(sass)[0]  # the first consumer's main loop
                row = dict(kernel="gluon", head_dim=d, causal=causal, config=cfg.label() + "-kv" * keyed,
                           stack_bytes=int(stack.group(1)) if stack else None, loop=loop)
                rows.append(row)
                print(f"gluon d={d:<3} {'causal' if causal else 'full':<6} {row['config']:<14} stack {row['stack_bytes']} "
                      f"loop instr {loop['instr']} P pack+shuffle {loop['p_pack']} LDL+STL {loop['ldl'] + loop['stl']}",
                      flush=True)
    return rows


def quick_summary(run: Run) -> None:
    rows = run.sections.get("quick", [])
    report_checks("quick", rows)
    speed = [r for r in rows if r.get("section") == "speed" and "tflops" in r]
    fa3 = {r["case"]: r["tflops"] for r in speed if r["provider"] == "fa3-fwd FP8"}
    print(f"{'case':<26} {'version':<6} {'config':<20} {'TFLOP/s':>8} {'x FA3':>6}")
    for r in speed:
        ratio = r["tflops"] / fa3[r["case"]] if r["case"] in fa3 else float("nan")
        print(f"{r['case']:<26} {r['provider'][:6]:<6} {r['config']:<20} {r['tflops']:8.0f} {ratio:6.2f}")


def summary(run: Run) -> None:
    rows = run.sections.get("grid", [])
    print("\ncase                         ours  fa3fp8  ratio  fa3bf16  vllmfp8")
    for r in bench.ratio_table(rows, "fp8lab", "fa3-fwd FP8"):
        other = {(x["case"], x["provider"]): x.get("tflops") for x in rows}
        print(f"{r['case']:<28} {r['fp8lab']:5.0f}  {r['fa3-fwd FP8']:6.0f}  {r['ratio']:5.2f}  "
              f"{other.get((r['case'], 'fa3-fwd bf16')) or 0:7.0f}  {other.get((r['case'], 'vLLM FA3 FP8 varlen')) or 0:7.0f}")
    for r in run.sections.get("quant", []):
        print(r)
    report_checks("grid run", run.sections.get("correctness", []))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--budget", type=float, default=420.0, help="seconds for the whole run")
    ap.add_argument("--skip", default="", help="comma list of sections to skip: correctness,quant,sweep,grid")
    ap.add_argument("--quick", action="store_true",
                    help="only v2 vs the v4 candidates vs FA3 FP8 on the weakest cases (fits ~130 s)")
    ap.add_argument("--v5", action="store_true",
                    help="the whole grid: default vs the v5 (pipeline_qk) candidates vs FA3 / vLLM (~6 min)")
    ap.add_argument("--v6", action="store_true",
                    help="the whole grid: default vs the v6 candidates vs fa3-fwd FP8 (~5 min)")
    ap.add_argument("--ws", action="store_true",
                    help="v9: the warp-specialized Gluon kernel's candidates vs Triton, FA3 and vLLM (~7 min)")
    ap.add_argument("--v10", action="store_true",
                    help="the grid: v10's causal mask and permute_keys against v9's kernels, FA3 and vLLM (~8 min)")
    ap.add_argument("--v10-grid", action="store_true",
                    help="the grid, every provider in one run, one median each (notebook 07's schema, ~3 min)")
    ap.add_argument("--v11", action="store_true",
                    help="the grid: the Gluon kernel's candidates against an earlier version's (--old), Triton, FA3, vLLM")
    ap.add_argument("--v11-grid", action="store_true",
                    help="as --v10-grid, with the Gluon kernel (key-ordered V) at every head dim (~3 min)")
    ap.add_argument("--v23-grid", action="store_true",
                    help="as --v11-grid, each case's providers timed in --repeats interleaved rounds after --settle "
                         "seconds of running them in turn (bench.interleaved_times); medians in bench_v23_grid.json")
    ap.add_argument("--settle", type=float, default=1.5,
                    help="--v23-grid, --api-grid: seconds of load before each case's rounds")
    ap.add_argument("--api-grid", action="store_true",
                    help="the grid through fp8lab.attention (V in FA3's layout) against the kernels called directly, "
                         "in interleaved rounds as --v23-grid; bench_api_grid.json")
    ap.add_argument("--quant", action="store_true", help="only the quantization section (~2 min)")
    ap.add_argument("--quant-shapes", action="store_true",
                    help="v18: quantization at b.s = 16k tokens x 32 x 128 for b in QUANT_BATCHES (~2 min)")
    ap.add_argument("--dims", default="64,128,256", help="--ws, --v10: head dims to run (correctness and grid)")
    ap.add_argument("--repeats", type=int, default=3, help="--v10, --v11, --v23-grid: interleaved timing rounds per case")
    ap.add_argument("--candidates", default="",
                    help="--v10: replace its candidates, e.g. '128:m128n128w8s2-pq,128c:m64n128w4s2-pq-pk' "
                         "(head dim, c for causal, config label); cases not named keep their list")
    ap.add_argument("--ws-candidates", default="",
                    help="--v11: the Gluon configs per case, e.g. '256:ws-n64s5-kv,256c:ws-n64s4-pp-kv' (-kv: V^T "
                         "from key_ordered_vt)")
    ap.add_argument("--old", default="v10", help="--v11: the earlier version to time against (v10, v11)")
    ap.add_argument("--derive-grid", metavar="RAW_JSON",
                    help="no GPU: write bench_v5_grid.json from a --v5 run's raw JSON (see derive_grid)")
    ap.add_argument("--inspect", action="store_true",
                    help="no GPU needed: compile v2 and the v4 candidates for sm_90 and report registers, "
                         "spills and wgmma serialization (writes inspect_sm90.json)")
    args = ap.parse_args()
    out = Path(args.out)
    set_candidates(args.candidates)
    set_candidates(args.ws_candidates, V11_WS_CANDIDATES, _wc)
    if args.inspect:
        inspect_offline(out)
        return
    if args.derive_grid:
        print("wrote", derive_grid(Path(args.derive_grid)))
        return
    out.mkdir(parents=True, exist_ok=True)
    run = Run(out, args.budget)
    skip = set(filter(None, args.skip.split(",")))
    prov = load_providers(vllm=not args.quick)  # --quick compares with fa3-fwd only
    print("context:", json.dumps(run.ctx), flush=True)
    dims = tuple(int(d) for d in args.dims.split(","))
    sections = (  # (wanted, name, run it, print its summary): one section per call
        (args.v5, "v5", lambda: v5(run, prov), lambda: v5_summary(run, "v5")),
        (args.v6, "v6", lambda: v5(run, prov, v6_candidates, "v6", full=False), lambda: v5_summary(run, "v6")),
        (args.v10_grid, "v10_grid", lambda: v10_grid(run, prov), lambda: v10_grid_summary(run)),
        (args.v11_grid, "v11_grid", lambda: v10_grid(run, prov, "v11_grid", (64, 128, 256), key_ordered=True),
         lambda: v10_grid_summary(run, "v11_grid")),
        (args.v23_grid, "v23_grid", lambda: rounds_grid(run, prov, rounds=args.repeats, settle_s=args.settle),
         lambda: v10_grid_summary(run, "v23_grid")),
        (args.api_grid, "api_grid", lambda: api_grid(run, prov, rounds=args.repeats, settle_s=args.settle),
         lambda: api_grid_summary(run)),
        (args.v10, "v10", lambda: v10(run, prov, dims, args.repeats), lambda: v10_summary(run)),
        (args.v11, "v11", lambda: v11(run, prov, dims, args.repeats, args.old), lambda: v11_summary(run)),
        (args.ws, "ws", lambda: ws(run, prov, dims), lambda: ws_summary(run)),
        (args.quick, "quick", lambda: quick(run, prov), lambda: quick_summary(run)),
        (args.quant_shapes, "quant_shapes", lambda: quant_shapes(run), lambda: quant_shapes_summary(run)),
    )
    for wanted, section, fn, report in sections:
        if wanted:
            t = time.time()
            try:
                fn()
            except Exception:  # noqa: BLE001
                traceback.print_exc()
            print(f"{section}: {time.time() - t:.1f}s", flush=True)
            report()
            return
    if args.quant:
        skip |= {"correctness", "sweep", "grid"}
    for name, fn in (("correctness", lambda: correctness(run, prov)), ("quant", lambda: quant(run))):
        if name in skip:
            continue
        t = time.time()
        try:
            fn()
        except Exception:  # noqa: BLE001
            traceback.print_exc()
        print(f"{name}: {time.time() - t:.1f}s", flush=True)
    best = {}
    if "sweep" not in skip:
        t = time.time()
        try:
            best = sweep(run, 0.6)
        except Exception:  # noqa: BLE001
            traceback.print_exc()
        print(f"sweep: {time.time() - t:.1f}s", flush=True)
    if "grid" not in skip:
        t = time.time()
        try:
            grid(run, best, prov)
        except Exception:  # noqa: BLE001
            traceback.print_exc()
        print(f"grid: {time.time() - t:.1f}s", flush=True)
    summary(run)


if __name__ == "__main__":
    main()

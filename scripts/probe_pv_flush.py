"""What `pv_flush` costs once its tiles fit in registers, in both kernels, and who else flushes (v28; Hopper GPU).

    PYTHONPATH=. python3 scripts/probe_pv_flush.py OUT_DIR [--accuracy [--head-dim D]] [--timing] [--grid]
                                                   [--rounds N] [--dims D,..]

--accuracy (OUT_DIR/accuracy.json, or accuracy_dD.json): notebook 05 (e)'s long-context inputs (16
queries, 4 heads, d = 128 or --head-dim, N(0, 1) q and k, v + 1, quantized per head; non-causal) at
2k, 16k and 64k keys. Rel L2 against exact float64 attention on the float inputs of: the Triton
kernel's default config and every `PV_FLUSH_CANDIDATES` config; the Gluon kernel with and without
`pv_flush` (at d = 256 also every `WS_PV_HALVES_CANDIDATES` config); fa3-fwd and vLLM's FA3
(whichever are installed, through `fp8lab.attention`); the emulation with fp32 accumulation,
Hopper's 13-bit MMA accumulator (upstream FA3), a flush every key block and every 4 blocks (vLLM's
PR #122 interval).

--timing (OUT_DIR/timing.json): 2x8192x32xd (16k tokens, the grid's middle case), causal and not,
for each head dim of --dims: `bench.case_calls` (the non-flush defaults of both kernels, fa3-fwd
FP8, vLLM's varlen path, FA3 bf16) plus every `PV_FLUSH_CANDIDATES` config, the Triton default
config with `pv_flush` (v27's form), the Gluon kernel's default with `pv_flush` and at d = 256 every
`WS_PV_HALVES_CANDIDATES` config, on the same inputs, in interleaved rounds
(`bench.interleaved_times`).

--grid (OUT_DIR/grid.json, or grid_dD.json for other --dims): the issue's grid (`bench.bench_grid`:
16k tokens, 32 heads, 4k-16k per sequence, causal and not), every provider of `bench.case_calls`
plus both kernels' `pv_flush` defaults ("fp8lab pf", "fp8lab ws pf"), in interleaved rounds.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import torch
from probe_long_context import error_rows  # scripts/, beside this one

from fp8lab import bench, env
from fp8lab.data import make_qkv
from fp8lab.reference import AccumulatorModel, attention_exact, attention_fa3_fp8, quantize_qkv
from fp8lab.reference.fa3 import HOPPER_FP8_MMA


def accuracy(out: Path, seqlens: list[int], head_dim: int = 128) -> None:
    from fp8lab import attention
    from fp8lab.backends import probe_all
    from fp8lab.kernels import attention as A
    from fp8lab.kernels import fp8_attention, pretranspose_v
    from fp8lab.kernels.attention_ws import (WS_PV_HALVES_CANDIDATES, default_ws_config, fp8_attention_ws,
                                            key_ordered_vt, ws_supported)

    dev = "cuda"
    found = [n for n, (ok, _) in probe_all().items() if ok and n in ("fa3-fwd", "vllm", "vllm-so", "flash-attn-3")]
    bits = HOPPER_FP8_MMA.mantissa_bits
    rows = []
    for sk in seqlens:
        q, k, v = make_qkv("normal", seqlen_q=16, seqlen_k=sk, heads_q=4, head_dim=head_dim, seed=100 + sk, device=dev)
        v = v + 1.0
        ref = attention_exact(q, k, v)
        qq = quantize_qkv(q, k, v)
        ds = list(qq.descales.values())
        vt = pretranspose_v(qq.v)
        base = A.default_config(head_dim, False)
        outs = {f"triton {base.label()}": lambda: fp8_attention(qq.q, qq.k, vt, *ds)}
        for cfg in A.PV_FLUSH_CANDIDATES[head_dim]:
            outs[f"triton {cfg.label()}"] = lambda c=cfg: fp8_attention(qq.q, qq.k, vt, *ds, config=c)
        if ws_supported():
            vk = key_ordered_vt(qq.v)
            wcfgs = [default_ws_config(head_dim, False, key_ordered=True, pv_flush=f) for f in (False, True)]
            for wcfg in wcfgs + (WS_PV_HALVES_CANDIDATES if head_dim == 256 else []):
                outs[f"gluon {wcfg.label()}"] = lambda c=wcfg: fp8_attention_ws(
                    qq.q, qq.k, vk, q_descale=ds[0], k_descale=ds[1], v_descale=ds[2], config=c)[0]
        for name in found:
            outs[name] = lambda n=name: attention(qq.q, qq.k, qq.v, q_descale=ds[0], k_descale=ds[1],
                                                  v_descale=ds[2], backend=f"fa3:{n}")
        bn = base.block_n
        for name, model in (
            ("emulation, fp32 accumulate", None),
            ("emulation, FP8 MMA 13 bits", AccumulatorModel(bits, apply_to_qk=False)),
            ("emulation, flush every block", AccumulatorModel(bits, promote_every=bn, apply_to_qk=False)),
            ("emulation, flush every 4 blocks", AccumulatorModel(bits, promote_every=4 * bn, apply_to_qk=False)),
        ):
            outs[name] = lambda m=model: attention_fa3_fp8(qq.q, qq.k, qq.v, *ds, block_n=bn, accumulator=m)
        rows += error_rows(outs, ref, sk)
    name = "accuracy.json" if head_dim == 128 else f"accuracy_d{head_dim}.json"
    bench.write_results(out / name, rows, env.context(dtype="float8_e4m3fn"))


def timing(out: Path, dims: list[int], rounds: int) -> None:
    from fp8lab.kernels import attention as A
    from fp8lab.kernels.attention_ws import WS_PV_HALVES_CANDIDATES, default_ws_config

    rows = []
    for d in dims:
        for causal in (False, True):
            case = bench.AttentionCase(2, 8192, 32, 32, d, causal)
            v27 = replace(A.default_config(d, causal), pv_flush=True)
            configs = {f"fp8lab {cfg.label()}": cfg for cfg in (v27, *A.PV_FLUSH_CANDIDATES[d])}
            for wcfg in [default_ws_config(d, causal, True, pv_flush=True)] + (WS_PV_HALVES_CANDIDATES if d == 256 else []):
                configs["fp8lab ws " + wcfg.label()] = wcfg
            calls = bench.case_calls(case, configs=configs)
            timed = bench.interleaved_times(calls, rounds=rounds, settle_s=1.0, sync=torch.cuda.synchronize)
            for row in bench.case_rows(case, timed):
                rows.append(row)
                print(row, flush=True)
            bench.write_results(out / "timing.json", rows, env.context(dtype="float8_e4m3fn"))


def grid(out: Path, rounds: int, dims: list[int]) -> None:
    """The v23 grid (`bench.bench_grid`) with both kernels' `pv_flush` defaults beside every provider."""
    from fp8lab.kernels import default_config, default_ws_config

    rows = []
    for case in bench.bench_grid(head_dims=dims):
        d, causal = case.head_dim, case.causal
        configs = {"fp8lab pf": default_config(d, causal, pv_flush=True),
                   "fp8lab ws pf": default_ws_config(d, causal, key_ordered=True, pv_flush=True)}
        calls = bench.case_calls(case, configs=configs)
        timed = bench.interleaved_times(calls, rounds=rounds, settle_s=1.0, sync=torch.cuda.synchronize)
        rows += bench.case_rows(case, timed, {name: c.label() for name, c in configs.items()})
        bench.write_results(out / ("grid.json" if len(dims) == 3 else f"grid_d{'_'.join(map(str, dims))}.json"), rows,
                            env.context(dtype="float8_e4m3fn"))
        print(case.label(), bench.case_medians(rows, case), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--accuracy", action="store_true")
    ap.add_argument("--timing", action="store_true")
    ap.add_argument("--grid", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--seqlens", default="2048,16384,65536")
    ap.add_argument("--head-dim", type=int, default=128, help="--accuracy: the inputs' head dim")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("probe_pv_flush: needs a GPU (the Triton kernel's pv_flush is checked on the CPU by the tests)")
    a.out.mkdir(parents=True, exist_ok=True)
    if a.accuracy:
        accuracy(a.out, [int(s) for s in a.seqlens.split(",")], a.head_dim)
    if a.timing:
        timing(a.out, [int(s) for s in a.dims.split(",")], a.rounds)
    if a.grid:
        grid(a.out, a.rounds, [int(s) for s in a.dims.split(",")])


if __name__ == "__main__":
    main()

"""V transposed inside the Gluon kernel (`WsConfig(transpose_v=True)`, v30, v31): its bits and its speed (Hopper GPU).

    PYTHONPATH=. python3 scripts/probe_transpose_v.py OUT_DIR [--check] [--timing] [--grid] [--rounds N] [--dims D,..]

--check (OUT_DIR/check.json): for head dims 64, 128 and 256, causal and not, GQA (8 query heads on 2
kv heads), key counts that are not multiples of 128, b = 1 and 2, persistent or not, V strided:
the kernel on V as stored (the key-ordered default's tiles, persistent and not, and at 64 and 128 with
four transposer warps) against the same config on `key_ordered_vt(v)` (`transpose_v=False`), which
holds the same V^T in shared memory. Bits of out and lse must be equal.

--timing (OUT_DIR/timing.json): 2x8192x32xd, causal and not, for each head dim of --dims:
`bench.case_calls` (both kernels' defaults, fa3-fwd FP8, vLLM's varlen path, FA3 bf16), plus "fp8lab
ws + copy" (`key_ordered_vt` inside the timed call, as `fp8lab.attention` runs it), every
`transpose_v` candidate (`candidates`) and, below head dim 256, the 4-stage candidates with a
transposer that does no work ("no transpose": wrong results, the cost of the rest), in interleaved
rounds (`bench.interleaved_times`).

--grid (OUT_DIR/grid.json): the issue's grid (`bench.bench_grid`) with the same extra providers.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, replace
from pathlib import Path

import torch

from fp8lab import bench, env


def candidates(d: int, causal: bool) -> list:
    """`transpose_v` configs worth timing at head dim d: the default (`default_ws_config(d, causal,
    transpose_v=True)`) at every stage count from 3 that fits in shared memory (`WsConfig.fits`), and,
    where two consumers leave the registers, by 4 transposer warps at 4 and 5 stages."""
    from fp8lab.kernels.attention_ws import default_ws_config

    base = default_ws_config(d, causal, transpose_v=True)
    out = [base] + [replace(base, stages=s) for s in (3, 4, 5, 6)]
    if d < 256:
        out += [replace(base, consumers=2, transposer_warps=4, stages=s) for s in (4, 5)]
    return [c for c in dict.fromkeys(out) if c.fits(d)]


def check(out: Path) -> None:
    from fp8lab.kernels import quantize_fp8
    from fp8lab.kernels.attention_ws import default_ws_config, fp8_attention_ws, key_ordered_vt

    rows = []
    gen = torch.Generator(device="cuda").manual_seed(30)
    for d in (64, 128, 256):
        for causal in (False, True):
            for b, s_q, s_k in ((2, 333, 333), (1, 77, 1000)):
                x = [torch.randn(b, s, h, d, device="cuda", generator=gen).to(torch.bfloat16)
                     for s, h in ((s_q, 8), (s_k, 2), (s_k, 4))]
                (q, qd), (k, kd) = (quantize_fp8(t, "head", heads_kv=2) for t in x[:2])
                v4, vd4 = quantize_fp8(x[2], "head", heads_kv=4)
                v, vd = v4[:, :, :2], vd4[:, :2]  # V strided: 2 of 4 kv heads, rows 4 x d bytes apart
                vk = key_ordered_vt(v.contiguous())
                base = replace(default_ws_config(d, causal, key_ordered=True), transpose_v=True)
                four = [replace(base, consumers=2, transposer_warps=4)] if d < 256 else []
                cfgs = [base, replace(base, persistent=False, dynamic=False), *four]
                for cfg in cfgs:
                    ref = fp8_attention_ws(q, k, vk, q_descale=qd, k_descale=kd, v_descale=vd, causal=causal,
                                           config=replace(cfg, transpose_v=False))
                    row = dict(head_dim=d, causal=causal, shape=f"{b}x{s_q}/{s_k}x8/2", config=cfg.label())
                    try:
                        got = fp8_attention_ws(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, causal=causal,
                                               config=cfg)
                        torch.cuda.synchronize()
                        row.update(out_equal=bool(torch.equal(got[0], ref[0])), lse_equal=bool(torch.equal(got[1], ref[1])),
                                   max_abs=float((got[0].float() - ref[0].float()).abs().max()),
                                   finite=bool(torch.isfinite(got[0]).all()))
                    except Exception as e:  # noqa: BLE001 - recorded, the probe goes on
                        row.update(error=f"{type(e).__name__}: {e}"[:300])
                    rows.append(row)
                    print(row, flush=True)
    bench.write_results(out / "check.json", rows, env.context(dtype="float8_e4m3fn"))
    bad = [r for r in rows if not (r.get("out_equal") and r.get("lse_equal"))]
    print(f"check: {len(rows) - len(bad)} of {len(rows)} equal bit for bit", flush=True)


def _calls(case: bench.AttentionCase) -> tuple[dict, dict]:
    from fp8lab.kernels import quantize_fp8
    from fp8lab.kernels.attention_ws import default_ws_config, fp8_attention_ws, key_ordered_vt

    d, causal = case.head_dim, case.causal
    configs = {f"fp8lab ws {c.label()}": c for c in candidates(d, causal)}
    calls = bench.case_calls(case, configs=configs)
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = [torch.randn(case.batch, case.seqlen, h, d, device="cuda", generator=gen).to(torch.bfloat16)
         for h in (case.heads_q, case.heads_kv, case.heads_kv)]
    (q, qd), (k, kd), (v, vd) = (quantize_fp8(t, "head", heads_kv=case.heads_kv) for t in x)
    cfg = default_ws_config(d, causal, key_ordered=True)
    calls["fp8lab ws + copy"] = lambda: fp8_attention_ws(q, k, key_ordered_vt(v), q_descale=qd, k_descale=kd,
                                                         v_descale=vd, causal=causal, config=cfg)
    if d < 256:  # what the loads cost without the transposes (wrong results: timing only)
        empty = _empty_transposer()
        for c in candidates(d, causal):
            if c.stages == 4:
                ec = empty.WsConfig(**asdict(c))
                calls[f"no transpose {c.label()}"] = lambda ec=ec: empty.fp8_attention_ws(
                    q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, causal=causal, config=ec)
    return calls, configs


def _empty_transposer():
    """attention_ws with a transposer that only signals (its stages keep stale V^T): the kernel's cost
    without the transposes' work."""
    from probe_edit import edited_copy  # scripts/, beside this one

    from fp8lab.kernels import attention_ws

    return edited_copy(attention_ws, [("                for c2 in gl.static_range(CH // 2):\n",
                                       "                for c2 in gl.static_range(0):\n")], "attention_ws_no_transpose")


def _time(out: Path, name: str, cases: list, rounds: int) -> None:
    rows = []
    for case in cases:
        calls, configs = _calls(case)
        timed = bench.interleaved_times(calls, rounds=rounds, settle_s=1.5, sync=torch.cuda.synchronize)
        rows += bench.case_rows(case, timed, {name: c.label() for name, c in configs.items()})
        bench.write_results(out / name, rows, env.context(dtype="float8_e4m3fn"))
        print(case.label(), bench.case_medians(rows, case), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--timing", action="store_true")
    ap.add_argument("--grid", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dims", default="64,128,256")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("probe_transpose_v: needs a Hopper GPU")
    a.out.mkdir(parents=True, exist_ok=True)
    dims = [int(s) for s in a.dims.split(",")]
    if a.check:
        check(a.out)
    if a.timing:
        _time(a.out, "timing.json", [bench.AttentionCase(2, 8192, 32, 32, d, c) for d in dims for c in (False, True)],
              a.rounds)
    if a.grid:
        _time(a.out, "grid.json", list(bench.bench_grid(head_dims=dims)), a.rounds)


if __name__ == "__main__":
    main()

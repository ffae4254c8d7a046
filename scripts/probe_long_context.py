"""Does our kernels' error grow with the context as upstream FA3's does? (Hopper GPU; CPU: Triton interpreter)

    PYTHONPATH=. python3 scripts/probe_long_context.py OUT.json [SEQLENS] [--timing]

Notebook 05 (e)'s inputs: 16 queries, 4 heads, d = 128, N(0, 1) q and k, v + 1 (so P.V grows with the
context), quantized per head; non-causal. For each number of keys: rel L2 against exact float64
attention on the float inputs of the Triton kernel (V pre-transposed), the Gluon kernel
(`key_ordered_vt`), fa3-fwd and the emulation with fp32 accumulation, with Hopper's FP8 MMA
accumulator on P.V (13 bits, upstream FA3) and with a flush every key block (vLLM); since v27 also the
Triton kernel with `AttentionConfig(pv_flush=True)`. With `--timing`, the Triton kernel's default
config against the same with `pv_flush` on the grid's 2x8192x32x128 (non-causal and causal), three
interleaved rounds.
"""

from __future__ import annotations

import sys
from dataclasses import replace

import torch

from fp8lab import bench, env
from fp8lab.data import make_qkv
from fp8lab.metrics import rel_l2
from fp8lab.reference import AccumulatorModel, attention_exact, attention_fa3_fp8, quantize_qkv
from fp8lab.reference.fa3 import HOPPER_FP8_MMA


def main(out: str, seqlens: list[int], timing: bool = False) -> None:
    from fp8lab.kernels import attention as A
    from fp8lab.kernels import fp8_attention, pretranspose_v
    from fp8lab.kernels.attention_ws import default_ws_config, fp8_attention_ws, key_ordered_vt, ws_supported

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        import fa3_fwd_interface as fa3
    except ImportError:
        fa3 = None
    rows = []
    for sk in seqlens:
        q, k, v = make_qkv("normal", seqlen_q=16, seqlen_k=sk, heads_q=4, head_dim=128, seed=100 + sk, device=dev)
        v = v + 1.0
        ref = attention_exact(q, k, v)
        qq = quantize_qkv(q, k, v)
        ds = list(qq.descales.values())
        bn = A.default_config(128, False).block_n
        flush = replace(A.default_config(128, False), pv_flush=True)
        outs = {"triton kernel": lambda: fp8_attention(qq.q, qq.k, pretranspose_v(qq.v), *ds),
                "triton kernel, pv_flush": lambda: fp8_attention(qq.q, qq.k, pretranspose_v(qq.v), *ds, config=flush)}
        if ws_supported():
            outs["gluon kernel"] = lambda: fp8_attention_ws(qq.q, qq.k, key_ordered_vt(qq.v), q_descale=ds[0],
                                                            k_descale=ds[1], v_descale=ds[2])[0]
        if fa3 is not None and dev == "cuda":
            def fa3_out():  # the run of 2026-12-01 01:15Z indexed the batch here, not the result: no fa3 rows
                r = fa3.flash_attn_func(qq.q, qq.k, qq.v, q_descale=ds[0], k_descale=ds[1], v_descale=ds[2])
                return r[0] if isinstance(r, tuple) else r
            outs["fa3-fwd"] = fa3_out
        wbn = default_ws_config(128, False, key_ordered=True).block_n
        for name, model, block in (
            ("emulation, fp32 accumulate", None, bn),
            ("emulation, FP8 MMA 13 bits", AccumulatorModel(HOPPER_FP8_MMA.mantissa_bits, apply_to_qk=False), bn),
            ("emulation, FP8 MMA 13 bits, gluon block", AccumulatorModel(HOPPER_FP8_MMA.mantissa_bits, apply_to_qk=False), wbn),
            ("emulation, flush every block", AccumulatorModel(HOPPER_FP8_MMA.mantissa_bits, promote_every=bn,
                                                              apply_to_qk=False), bn),
        ):
            outs[name] = (lambda m=model, b=block: attention_fa3_fp8(qq.q, qq.k, qq.v, *ds, block_n=b, accumulator=m))
        rows += error_rows(outs, ref, sk)
    if timing and dev == "cuda":
        from fp8lab.kernels import quantize_fp8

        for causal in (False, True):
            case = bench.AttentionCase(2, 8192, 32, 32, 128, causal)
            x = [torch.randn(2, 8192, 32, 128, device=dev).to(torch.bfloat16) for _ in range(3)]
            (q8, qd), (k8, kd), (v8, vd) = (quantize_fp8(t, "head") for t in x)
            vt = pretranspose_v(v8)
            base = A.default_config(128, causal)
            fns = {cfg.label(): (lambda c=cfg: fp8_attention(q8, k8, vt, qd, kd, vd, causal=causal, config=c))
                   for cfg in (base, replace(base, pv_flush=True))}
            for r in bench.interleaved_times(fns, rounds=3, settle_s=0.5, sync=torch.cuda.synchronize):
                if "ms" in r:
                    rows.append(dict(case=case.label(), config=r["provider"], round=r["round"], ms=r["ms"],
                                     tflops=bench.tflops(case.flops(), r["ms"])))
                else:
                    rows.append(dict(case=case.label(), config=r["provider"], error=r.get("error")))
                print(rows[-1], flush=True)
    bench.write_results(out, rows, env.context(dtype="float8_e4m3fn"))


def error_rows(outs: dict, ref: torch.Tensor, seqlen_k: int) -> list[dict]:
    """One row per output of `outs` (name -> call): its rel L2 against `ref`, or the error it raised
    (one failure must not lose the rest); each printed as it comes."""
    rows = []
    for name, fn in outs.items():
        try:
            rows.append(dict(seqlen_k=seqlen_k, who=name, rel_l2=float(rel_l2(fn(), ref))))
        except Exception as e:  # noqa: BLE001
            rows.append(dict(seqlen_k=seqlen_k, who=name, error=repr(e)[:300]))
        print(rows[-1], flush=True)
    return rows


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--timing"]
    main(args[0], [int(s) for s in (args[1] if len(args) > 1 else "2048,16384,65536").split(",")],
         timing="--timing" in sys.argv)

"""How faithfully does fp8lab's FA3 FP8 emulation follow the production kernels? (Hopper GPU)

For each input distribution, head dim and mask, the same FP8 inputs (per-head
amax/448 descales) go through production FA3 (fa3-fwd's `flash_attn_func`,
vLLM's `torch.ops._vllm_fa3_C.fwd`) and through `attention_fa3_fp8` in several
variants (FA3's block size, other block sizes, first-to-last order, row sum of
the e4m3 P, accumulator models). The figure of merit is

    ratio = rel_l2(emulation, FA3) / rel_l2(FA3, exact)

with exact = float64 attention on the original float inputs (target: < 0.1),
and ratio_deq with exact attention on the dequantized FP8 inputs instead.
A long-context section compares FA3's error growth with the accumulator model.

Run on the GPU host (see notebooks/05_fp8_attention_accuracy.py for the record):
    python scripts/gpu_fidelity.py --out results/h200/fidelity.json --vllm-lib .gpu/_vllm_fa3_C.abi3.so
`--dry-run` runs tiny shapes on the CPU with the emulation standing in for FA3.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fp8lab.data import DISTRIBUTIONS, make_qkv  # noqa: E402
from fp8lab.metrics import rel_l2  # noqa: E402
from fp8lab.reference import AccumulatorModel, attention_exact, attention_fa3_fp8, fa3_block_n, quantize_qkv  # noqa: E402

BLOCK_SWEEP = (64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256)
ACC_BITS = (22, 16, 14, 13, 12, 11, 10)
ACC_BITS_QK = (22, 16, 14, 13, 12)  # the Q.K^T model costs k_chunk x the score tile in memory
# our labels -> fp8lab.data's names (the paper's outliers were renamed once already)
DATA_NAMES = {"normal": "normal", "outliers": "fa3_outliers" if "fa3_outliers" in DISTRIBUTIONS else "outliers"}


def context() -> dict:
    try:
        from fp8lab.env import context as ctx

        return ctx()
    except Exception as e:  # noqa: BLE001 - the record must still carry what we can find
        return {"torch": torch.__version__, "cuda": torch.version.cuda, "error": repr(e),
                "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None}


def fa3_fwd_provider():
    from fa3_fwd_interface import flash_attn_func

    def call(q, k, v, qd, kd, vd, causal, scale):
        out, lse = flash_attn_func(q, k, v, softmax_scale=scale, causal=causal,
                                   q_descale=qd, k_descale=kd, v_descale=vd, return_attn_probs=True)
        return out, lse

    return call


def vllm_provider(lib: str, num_splits: int = 1):
    if not hasattr(torch.ops, "_vllm_fa3_C") or not hasattr(torch.ops._vllm_fa3_C, "fwd"):
        torch.ops.load_library(lib)
    op = torch.ops._vllm_fa3_C.fwd

    def call(q, k, v, qd, kd, vd, causal, scale):
        b, sq, h, d = q.shape
        sk = k.shape[1]
        cu_q = torch.arange(0, (b + 1) * sq, sq, dtype=torch.int32, device=q.device)
        cu_k = torch.arange(0, (b + 1) * sk, sk, dtype=torch.int32, device=q.device)
        out, lse, _, _ = op(
            q.reshape(b * sq, h, d), k.reshape(b * sk, *k.shape[2:]), v.reshape(b * sk, *v.shape[2:]),
            None, None, None, None,  # k_new, v_new, q_v, out
            cu_q, cu_k, None, None, None,  # cu_seqlens_q/k/k_new, seqused_q/k
            sq, sk, None, None, None, None, None, None,  # max_seqlen_q/k, block_table, kv_batch_idx, leftpad_k, rotary
            qd, kd, vd, scale, causal, -1, -1, 0.0, True, None, num_splits, None, 0, None, 1, 0, None,
        )
        return out.reshape(b, sq, h, -1), lse.reshape(h, b, sq).permute(1, 0, 2)

    return call, str(op.default._schema)


def emulation_provider():
    def call(q, k, v, qd, kd, vd, causal, scale):
        return attention_fa3_fp8(q, k, v, qd, kd, vd, causal=causal, softmax_scale=scale, return_lse=True)

    return call


def variants(d: int, causal: bool, sweep: bool | str, provider_flavor: bool = True) -> dict[str, dict]:
    """Emulation variants: FA3's defaults, vLLM's block sizes, block/order/row-sum sweeps, accumulator models.

    sweep: False (defaults only), "hopper" (defaults and the Hopper accumulator model for each
    provider's block size), True (everything)."""
    bn = fa3_block_n(d, causal=causal)
    out: dict[str, dict] = {"default": {}}
    bn_vllm = fa3_block_n(d, causal=causal, flavor="vllm")
    if bn_vllm != bn:
        out["vllm_block_n"] = {"block_n": bn_vllm}
    if sweep == "hopper":
        out["acc_m13"] = {"accumulator": AccumulatorModel(13)}
        out["acc_m13_promote_block_vllm_bn"] = {"accumulator": AccumulatorModel(13, promote_every=bn_vllm),
                                                "block_n": bn_vllm}
        return out
    if not sweep:
        return out
    out.update({f"block_n={n}": {"block_n": n} for n in BLOCK_SWEEP if n not in (bn, bn_vllm)})
    out["first_to_last"] = {"reverse_blocks": False}
    out["rowsum_of_fp8_p"] = {"rowsum_of_fp8_p": True}
    out.update({f"acc_sum_m{m}": {"accumulator": AccumulatorModel(m, alignment="sum")} for m in (16, 13)})
    for m in ACC_BITS:
        if m in ACC_BITS_QK:
            out[f"acc_m{m}"] = {"accumulator": AccumulatorModel(m)}
        out[f"acc_m{m}_pv"] = {"accumulator": AccumulatorModel(m, apply_to_qk=False)}
    out["acc_m13_floor"] = {"accumulator": AccumulatorModel(13, rounding="floor")}
    for m in (13, 10):
        out[f"acc_m{m}_promote_block"] = {"accumulator": AccumulatorModel(m, promote_every=bn)}
        out[f"acc_m{m}_promote_block_vllm_bn"] = {"accumulator": AccumulatorModel(m, promote_every=bn_vllm),
                                                 "block_n": bn_vllm}
    return out


def lse_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    fin = torch.isfinite(a) & torch.isfinite(b)
    return float((a[fin] - b[fin]).abs().max()) if bool(fin.any()) else 0.0


def compare(case: dict, q, k, v, providers: dict, sweep: bool, acc_only: bool = False) -> dict:
    causal, scale = case["causal"], case["head_dim"] ** -0.5
    qq = quantize_qkv(q, k, v, "head")
    fp8 = (qq.q, qq.k, qq.v, qq.q_descale, qq.k_descale, qq.v_descale)
    exact = attention_exact(q, k, v, causal=causal)
    exact_deq = attention_exact(qq.q, qq.k, qq.v, causal=causal, **qq.descales)
    prov_out = {}
    for name, fn in providers.items():
        try:
            out, lse = fn(*fp8, causal, scale)
            torch.cuda.synchronize() if out.is_cuda else None
            prov_out[name] = (out, lse)
            case.setdefault("providers", {})[name] = {
                "err_vs_exact": rel_l2(out, exact), "err_vs_exact_deq": rel_l2(out, exact_deq), "variants": {}}
        except Exception as e:  # noqa: BLE001
            case.setdefault("providers", {})[name] = {"error": f"{type(e).__name__}: {e}"}
    vs = variants(case["head_dim"], causal, sweep)
    if acc_only:  # long context: the P.V accumulator only (the Q.K^T one is not what grows with the context)
        vs = {n: o for n, o in vs.items() if n in ("default", "vllm_block_n") or
              (n.startswith("acc_") and (n.endswith("_pv") or "promote" in n))}
        vs = {n: ({**o, "accumulator": replace(o["accumulator"], apply_to_qk=False)} if "accumulator" in o else o)
              for n, o in vs.items()}
    case["emulation"] = {}
    for vname, opts in vs.items():
        emu, emu_lse = attention_fa3_fp8(*fp8, causal=causal, softmax_scale=scale, return_lse=True, **opts)
        case["emulation"][vname] = {"err_vs_exact": rel_l2(emu, exact)}
        for name, (out, lse) in prov_out.items():
            diff = rel_l2(emu, out)
            rec = case["providers"][name]
            rec["variants"][vname] = {
                "rel_l2_vs_provider": diff,
                "ratio": diff / rec["err_vs_exact"],
                "ratio_deq": diff / rec["err_vs_exact_deq"],
                "bitwise_equal_fraction": float((emu.float() == out.float()).double().mean()),
                "lse_max_abs_diff": lse_diff(emu_lse, lse),
            }
    return case


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--vllm-lib", default=None)
    ap.add_argument("--seqlen", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--long", default="8192,32768,131072")
    ap.add_argument("--budget-s", type=float, default=240.0)
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes, emulation stands in for FA3")
    ap.add_argument("--cases", default="all", help="'all', or 'accumulator': 4 cases for the accumulator study")
    ap.add_argument("--variants", default="all", choices=("all", "hopper"),
                    help="'hopper': only FA3's defaults and the Hopper accumulator model (every case, fast)")
    args = ap.parse_args()
    t0 = time.time()
    dev = "cpu" if args.dry_run else "cuda"
    record: dict = {"what": "rel_l2 of fp8lab's attention_fa3_fp8 against production FA3 FP8; ratio = "
                    "rel_l2(emulation, FA3) / rel_l2(FA3, exact float64 on the float inputs); target < 0.1",
                    "context": context(), "cases": [], "long_context": [], "notes": []}
    providers: dict = {}
    if args.dry_run:
        providers["emulation-as-provider"] = emulation_provider()
        args.seqlen, args.heads, args.long = 300, 2, "1024"
    else:
        for name, make in (("fa3-fwd", fa3_fwd_provider), ("vllm-fa3", None)):
            try:
                if make is not None:
                    providers[name] = make()
                else:
                    if args.vllm_lib is None:
                        raise FileNotFoundError("--vllm-lib not given")
                    providers[name], schema = vllm_provider(args.vllm_lib)
                    record["vllm_op_schema"] = schema
                    record["vllm_lib_sha256"] = hashlib.sha256(Path(args.vllm_lib).read_bytes()).hexdigest()
            except Exception as e:  # noqa: BLE001
                record["notes"].append(f"{name} unavailable: {type(e).__name__}: {e}")
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        record["elapsed_s"] = round(time.time() - t0, 1)
        out_path.write_text(json.dumps(record, indent=1))

    cases = [(dist, d, causal, args.heads, args.heads, args.seqlen, args.seqlen)
             for dist in ("normal", "outliers") for d in (64, 128, 256) for causal in (False, True)]
    cases += [("normal", 128, True, args.heads, 2, args.seqlen // 2, args.seqlen),  # GQA, seqlen_q < seqlen_k
              ("outliers", 128, False, args.heads, 2, args.seqlen // 2, args.seqlen)]
    if args.cases == "accumulator":
        cases = [c for c in cases if (c[0], c[1], c[2], c[4]) in
                 {("normal", 128, False, args.heads), ("outliers", 128, False, args.heads),
                  ("normal", 256, False, args.heads), ("normal", 64, True, args.heads)}]
    for i, (dist, d, causal, hq, hk, sq, sk) in enumerate(cases):
        if time.time() - t0 > args.budget_s * 0.6:
            record["notes"].append(f"stopped the fidelity cases at {i}/{len(cases)}: time budget")
            break
        case = {"dist": dist, "head_dim": d, "causal": causal, "heads_q": hq, "heads_kv": hk, "seqlen_q": sq,
                "seqlen_k": sk, "batch": 1, "fa3_block_n": fa3_block_n(d, causal=causal), "seed": i}
        try:
            q, k, v = make_qkv(DATA_NAMES[dist], seqlen_q=sq, seqlen_k=sk, heads_q=hq, heads_kv=hk, head_dim=d, device=dev, seed=i)
            record["cases"].append(compare(case, q, k, v, providers, sweep=True if args.variants == "all" else "hopper"))
        except Exception:  # noqa: BLE001
            case["error"] = traceback.format_exc(limit=3)
            record["cases"].append(case)
        print(f"[{time.time() - t0:6.1f}s] {dist} d={d} causal={causal} hq/hk={hq}/{hk}", flush=True)
        save()
    for sk in [int(x) for x in args.long.split(",") if x]:
        for dist in ("normal", "v_offset"):
            if time.time() - t0 > args.budget_s:
                record["notes"].append(f"skipped long context {dist} {sk}: time budget")
                continue
            case = {"dist": dist, "head_dim": 128, "causal": False, "heads_q": 4, "heads_kv": 4, "seqlen_q": 128,
                    "seqlen_k": sk, "batch": 1, "fa3_block_n": fa3_block_n(128), "seed": 100 + sk}
            try:
                q, k, v = make_qkv("normal", seqlen_q=128, seqlen_k=sk, heads_q=4, head_dim=128, device=dev, seed=100 + sk)
                if dist == "v_offset":
                    v = v + 1.0  # every value positive-leaning: the accumulator grows with the context
                record["long_context"].append(compare(case, q, k, v, providers, sweep=True, acc_only=True))
            except Exception:  # noqa: BLE001
                case["error"] = traceback.format_exc(limit=3)
                record["long_context"].append(case)
            print(f"[{time.time() - t0:6.1f}s] long {dist} sk={sk}", flush=True)
            save()
    save()
    summary = []
    for c in record["cases"]:
        for p, r in c.get("providers", {}).items():
            if "variants" in r and "default" in r["variants"]:
                best = min(r["variants"].items(), key=lambda kv: kv[1]["ratio"])
                summary.append(f"{p:9s} {c['dist']:8s} d={c['head_dim']:3d} causal={c['causal']!s:5s} "
                               f"err={r['err_vs_exact']:.4f} ratio={r['variants']['default']['ratio']:.3f} "
                               f"best={best[0]}:{best[1]['ratio']:.3f}")
    print("\n".join(summary))
    print(f"done in {time.time() - t0:.1f}s -> {out_path}")


if __name__ == "__main__":
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    main()

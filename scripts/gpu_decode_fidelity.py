"""Paged FP8 decode as vLLM runs it: which key block and how many KV splits vLLM's FA3 uses, and
whether fp8lab's emulation follows it bit for bit. (Hopper GPU, vLLM's `_vllm_fa3_C` library.)

One decode step (one query token per sequence) over a paged FP8 cache written by
`fp8lab.kvcache.PagedKVCache` (block_size 16, vLLM's default), called the way vLLM's FlashAttention
backend calls FA3: the page table, `seqused_k`, descales `expand()`ed (stride 0), `num_splits`
1 (no split), forced 2 and 3, 0 (the kernel's own heuristic, vLLM's eager mode) and 32 (vLLM's cap
under CUDA graphs, without its scheduler metadata). The emulation (`attention_fa3_fp8` on the
gathered pages) is run with a sweep of key blocks and split counts; the figure of merit is the
fraction of bf16 outputs equal bit for bit, per sequence.

    python scripts/gpu_decode_fidelity.py --out results/h200/decode_fidelity.json --vllm-lib PATH
`--dry-run` runs tiny shapes on the CPU with the emulation standing in for vLLM (checks the script).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fp8lab.kvcache import PagedKVCache, random_pages, scaled_fp8_quant  # noqa: E402
from gpu_fidelity import lse_diff  # noqa: E402 - this folder's, on sys.path as the script's own
from fp8lab.reference import AccumulatorModel, attention_fa3_fp8, fa3_block_n, fa3_decode_splits  # noqa: E402

BLOCKS = (64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 256)
HEADS_Q, HEADS_KV, PAGE = 32, 8, 16


def context() -> dict:
    from fp8lab.env import context as ctx

    return ctx()


def make_case(d: int, lens: list[int], seed: int, dev: str, heads_kv: int = HEADS_KV) -> dict:
    """A paged FP8 cache holding random K/V for `lens`, a bf16 query per sequence, vLLM-style static scales."""
    g = torch.Generator().manual_seed(seed)
    table, slots, num_blocks = random_pages(lens, PAGE, g)
    k = torch.randn(sum(lens), heads_kv, d, generator=g) * 1.5
    v = torch.randn(sum(lens), heads_kv, d, generator=g)
    q = torch.randn(len(lens), HEADS_Q, d, generator=g) * 1.5
    ks, vs, qs = (float(x.abs().max()) / 448 * (1 + 0.5 * torch.rand((), generator=g).item()) for x in (k, v, q))
    cache = PagedKVCache.allocate(num_blocks, PAGE, heads_kv, d, k_scale=ks, v_scale=vs, device=dev)
    cache.write(k.to(dev), v.to(dev), slots.to(dev))
    return {"cache": cache, "table": table.to(dev), "lens": lens, "q8": scaled_fp8_quant(q.to(dev), qs), "q_scale": qs}


def descales(c: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n = len(c["lens"])
    kd, vd = c["cache"].descales(n)
    return torch.tensor(c["q_scale"], dtype=torch.float32, device=kd.device).expand(n, kd.shape[1]), kd, vd


def vllm_decode(op, c: dict, num_splits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`_vllm_fa3_C.fwd` as vLLM's FlashAttentionImpl calls it for a decode batch (fa_version=3)."""
    n, d = len(c["lens"]), c["q8"].shape[-1]
    dev = c["q8"].device
    cu_q = torch.arange(n + 1, dtype=torch.int32, device=dev)
    seqused = torch.tensor(c["lens"], dtype=torch.int32, device=dev)
    qd, kd, vd = descales(c)
    out, lse, *_ = op(
        c["q8"], c["cache"].key_cache, c["cache"].value_cache,
        None, None, None, None,  # k_new, v_new, q_v, out
        cu_q, None, None,  # cu_seqlens_q, cu_seqlens_k (paged: seqused_k), cu_seqlens_k_new
        None, seqused,  # seqused_q, seqused_k
        1, max(c["lens"]),  # max_seqlen_q, max_seqlen_k
        c["table"], None, None,  # page_table, kv_batch_idx, leftpad_k
        None, None, None,  # rotary
        qd, kd, vd, d ** -0.5, True, -1, -1, 0.0, True,
        None, num_splits, None, 0, None, 1, 0, None,  # scheduler_metadata, num_splits, pack_gqa, sm_margin, s_aux, cp
    )
    return out, lse


def emulate(c: dict, block_n: int, num_splits: int | list[int], accumulator) -> tuple[torch.Tensor, torch.Tensor]:
    k, v, cu_k = c["cache"].gather(c["table"], c["lens"])
    n = len(c["lens"])
    cu_q = torch.arange(n + 1, dtype=torch.int32, device=k.device)
    return attention_fa3_fp8(c["q8"], k, v, *descales(c), causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                             max_seqlen_q=1, max_seqlen_k=max(c["lens"]), block_n=block_n, num_splits=num_splits,
                             accumulator=accumulator, return_lse=True)


def equal_per_seq(a: torch.Tensor, b: torch.Tensor) -> list[float]:
    """Fraction of bit-equal bf16 outputs of each sequence (a, b: (num_seqs, heads, d))."""
    return (a.view(torch.int16) == b.view(torch.int16)).double().mean(dim=(1, 2)).tolist()


def validate(op, decode, dev: str, record: dict, out_path: Path, t0: float) -> None:
    """The model of FA3's decode tiles and splits (`fa3_block_n(decode=True)`, `fa3_decode_splits`)
    against vLLM's library: bits equal per sequence at the predicted split counts, per num_splits."""
    g = torch.Generator().manual_seed(11)
    cases = [(128, 8, "1 long seq", [8000]), (64, 8, "1 long seq", [8000]), (128, 8, "1 very long seq", [30000]),
             (128, 8, "2 mixed", [12000, 300]), (128, 8, "16 seqs", torch.randint(500, 6000, (16,), generator=g).tolist()),
             (128, 2, "4 seqs, 2 kv heads", torch.randint(300, 9000, (4,), generator=g).tolist()),
             (256, 4, "3 seqs, 4 kv heads", torch.randint(1000, 5000, (3,), generator=g).tolist())]
    if dev == "cpu":
        cases = [(64, 2, "dry", [300, 40])]
    for ci, (d, hk, label, lens) in enumerate(cases):
        c = make_case(d, lens, seed=7000 + ci, dev=dev, heads_kv=hk)
        bn = fa3_block_n(d, flavor="vllm", decode=True)
        acc = AccumulatorModel(13, promote_every=bn)
        rec: dict = {"head_dim": d, "heads_kv": hk, "case": label, "lens": lens, "block_n": bn, "by_num_splits": {}}
        for ns in (0, 32, 5):
            try:
                out, lse = decode(op, c, ns)
            except Exception as e:  # noqa: BLE001
                rec["by_num_splits"][str(ns)] = {"error": f"{type(e).__name__}: {e}"[:300]}
                continue
            pred = fa3_decode_splits(lens, hk, bn, num_splits=ns)
            emu, emu_lse = emulate(c, bn, pred, acc)
            one, _ = emulate(c, bn, 1, acc)
            rec["by_num_splits"][str(ns)] = {
                "predicted_splits": pred, "equal_at_predicted": equal_per_seq(emu, out),
                "equal_without_split": equal_per_seq(one, out),
                "lse_max_abs_diff": lse_diff(emu_lse, lse)}
        record.setdefault("validation", []).append(rec)
        summary = {ns: (r.get("predicted_splits", [])[:4], [round(x, 3) for x in r.get("equal_at_predicted", [])[:4]])
                   for ns, r in rec["by_num_splits"].items()}
        print(f"[{time.time() - t0:6.1f}s] validate d={d} hk={hk} {label}: {summary}", flush=True)
        out_path.write_text(json.dumps(record, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--vllm-lib", default=None)
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--max-splits", type=int, default=12, help="emulated split counts 1..N for the auto modes")
    ap.add_argument("--validate", action="store_true",
                    help="only check the model (fa3_block_n(decode=True), fa3_decode_splits) on new cases")
    args = ap.parse_args()
    t0 = time.time()
    dev = "cpu" if args.dry_run else "cuda"
    record: dict = {"what": __doc__.split("\n\n")[0], "context": context(), "page_size": PAGE, "heads_q": HEADS_Q,
                    "heads_kv": HEADS_KV, "cases": []}
    if args.dry_run:  # the emulation stands in for vLLM: block 96, the forced split counts, 2 for auto
        op = None
        decode = lambda _, c, ns: emulate(c, 96, ns if ns in (1, 2, 3) else 2, None)  # noqa: E731
        head_dims, cases = (64,), [("dry", [40, 75])]
    else:
        torch.ops.load_library(args.vllm_lib)
        op, decode = torch.ops._vllm_fa3_C.fwd, vllm_decode
        record["vllm_lib_sha256"] = hashlib.sha256(Path(args.vllm_lib).read_bytes()).hexdigest()
        head_dims = (64, 128, 256)
        g = torch.Generator().manual_seed(7)
        cases = [("4 seqs", torch.randint(300, 3000, (4,), generator=g).tolist()),
                 ("1 long seq", [8000]),
                 ("64 seqs", torch.randint(100, 2000, (64,), generator=g).tolist())]
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    if args.validate:
        validate(op, decode, dev, record, out_path, t0)
        print(f"done in {time.time() - t0:.1f}s -> {out_path}")
        return
    for d in head_dims:
        for ci, (label, lens) in enumerate(cases):
            c = make_case(d, lens, seed=100 * d + ci, dev=dev)
            rec: dict = {"head_dim": d, "case": label, "lens": lens, "vllm": {}}
            runs = {}
            for ns in (1, 2, 3, 0, 32):
                try:
                    runs[ns] = decode(op, c, ns)
                    if dev == "cuda":
                        torch.cuda.synchronize()
                except Exception as e:  # noqa: BLE001 - record why, go on
                    rec["vllm"][str(ns)] = {"error": f"{type(e).__name__}: {e}"[:300]}
            if 1 in runs:
                ref = runs[1][0]
                rec["vllm"]["same_bits_as_num_splits_1"] = {str(ns): equal_per_seq(o, ref) for ns, (o, _) in runs.items()}
                sweep = {}
                for bn in BLOCKS:  # which key block: no split, every accumulator exact
                    emu, _ = emulate(c, bn, 1, None)
                    sweep[bn] = sum(equal_per_seq(emu, ref)) / len(lens)
                rec["block_sweep_no_acc"] = sweep
                best = sorted(sweep, key=sweep.get, reverse=True)[:2]
                rec["block_sweep_acc13_flush"] = {}
                for bn in best:
                    emu, emu_lse = emulate(c, bn, 1, AccumulatorModel(13, promote_every=bn))
                    rec["block_sweep_acc13_flush"][bn] = sum(equal_per_seq(emu, ref)) / len(lens)
                bn = max(rec["block_sweep_acc13_flush"], key=rec["block_sweep_acc13_flush"].get)
                rec["best_block_n"] = bn
                acc = AccumulatorModel(13, promote_every=bn)
                rec["lse_max_abs_diff_no_split"] = lse_diff(emu_lse, runs[1][1])
                per_k = {}
                for k in range(1, args.max_splits + 1):
                    per_k[k] = emulate(c, bn, k, acc)[0]
                rec["splits"] = {}
                for ns, (o, _) in runs.items():
                    table = {k: equal_per_seq(e, o) for k, e in per_k.items()}
                    best_k = [max(table, key=lambda kk: table[kk][i]) for i in range(len(lens))]
                    rec["splits"][str(ns)] = {"best_k_per_seq": best_k,
                                              "equal_at_best_k": [table[best_k[i]][i] for i in range(len(lens))],
                                              "equal_at_k1": table[1]}
            record["cases"].append(rec)
            splits = {ns: r["best_k_per_seq"][:6] for ns, r in rec.get("splits", {}).items()}
            print(f"[{time.time() - t0:6.1f}s] d={d} {label}: best block_n {rec.get('best_block_n')}, "
                  f"best split counts per num_splits (first 6 seqs) {splits}", flush=True)
            record["elapsed_s"] = round(time.time() - t0, 1)
            out_path.write_text(json.dumps(record, indent=1))
    print(f"done in {time.time() - t0:.1f}s -> {out_path}")


if __name__ == "__main__":
    main()

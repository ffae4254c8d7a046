"""The experiments of notebook 05 (FP8 attention accuracy), as functions that return DataFrames.

Each one draws inputs from `fp8lab.data`, runs exact attention and the FA3 FP8
emulation, and reports errors with `fp8lab.metrics`. The notebook only calls,
plots and explains.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
from tqdm.auto import tqdm

from fp8lab.data import make_qkv
from fp8lab.formats import get_format
from fp8lab.layout import check_max_offset, check_values
from fp8lab.metrics import rel_l2, rmse
from fp8lab.reference.attribution import attribute_error
from fp8lab.reference.exact import attention_exact, dequantize
from fp8lab.reference.fa3 import HOPPER_FP8_MMA, AccumulatorModel, FA3Steps, attention_fa3_fp8, fa3_block_n
from fp8lab.reference.inputs import quantize_qkv

__all__ = [
    "decode_split_record",
    "PAPER_TABLE3",
    "FidelitySource",
    "SCALING_VARIANTS",
    "accumulator_comparison",
    "accumulator_study",
    "attribution_table",
    "cast_cost_table",
    "emulation_check",
    "fidelity_max_ratio",
    "fidelity_source",
    "fidelity_table",
    "head_input_range",
    "load_fidelity",
    "long_context_hardware",
    "mask_effect",
    "mask_effect_answers",
    "measure_fidelity",
    "long_context_record",
    "long_context_table",
    "max_offset_table",
    "p_cast_thresholds",
    "recorded_fa3_error",
    "quadrature_gap",
    "scaling_by_head",
    "scaling_table",
    "smallest_head_gain",
    "table3",
]

# FA3 paper (Shah et al. 2024, arXiv 2407.08608), Table 3: RMSE vs FP64 on
# N(0,1) + N(0,100)*Bernoulli(0.001) inputs. Typed from the paper (external data).
PAPER_TABLE3: dict[str, float] = {
    "FP8 baseline (per-tensor)": 2.4e-2,
    "FA3 FP8 (block quant + incoherent)": 9.1e-3,
    "FA3 FP8 without block quant": 9.3e-3,
    "FA3 FP8 without incoherent processing": 2.4e-2,
}

OUTLIERS = "fa3_outliers"  # fp8lab.data's name for the paper's distribution


def _inputs(dist: str, *, seqlen: int, heads: int, head_dim: int, seqlen_k: int | None = None,
            heads_kv: int | None = None, seed: int = 0, device: str | torch.device = "cpu"):
    return make_qkv(dist, seqlen_q=seqlen, seqlen_k=seqlen_k, heads_q=heads, heads_kv=heads_kv,
                    head_dim=head_dim, seed=seed, device=device)


def _check_dists(dists: tuple[str, ...]) -> None:
    """`dists` must be one or more distribution names: ("normal") is the string "normal", not a tuple."""
    if isinstance(dists, str) or not len(dists):
        raise ValueError(f"dists: expected a tuple of one or more distribution names such as ('normal',), got "
                         f"{dists!r}")


def _check_record(record: object, name: str = "record") -> None:
    """`record` must be a fidelity record as `load_fidelity` returns it (a dict), not its path."""
    if not isinstance(record, dict):
        raise TypeError(f"{name}: expected a fidelity record (a dict: load_fidelity(path) reads one), got "
                        f"{type(record).__name__} {record!r:.80}")


def _offsets(offsets: tuple[float, ...]) -> list:
    """`offsets`, each a valid FA3 max offset (a number in [0, 8])."""
    offsets = check_values("offsets", offsets, "(0, 8)")
    for off in offsets:
        check_max_offset(off)
    return offsets


def _fake_quantized(x: torch.Tensor, granularity) -> torch.Tensor:
    """x after an FP8 round trip with the given fp8lab.scaling granularity, float64."""
    from fp8lab.scaling import ScaleStrategy, fake_quantize

    return fake_quantize(x, ScaleStrategy(granularity))


def fp8_variant(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scales: str = "head", incoherent: bool = False,
    causal: bool = False, seed: int = 0, **fa3_options,
) -> torch.Tensor:
    """FA3 FP8 emulation of float q, k, v with a scale granularity and optional incoherent processing.

    scales: "tensor", "head" (FA3's (batch, heads_kv) descales) or "block" (one scale per
    kBlockM=128 query rows / kBlockN keys and head, the FA3 paper's block quantization,
    emulated by fake-quantizing the inputs since FA3's API only takes per-head descales).
    incoherent: rotate q and k by the same random-sign Hadamard matrix first (QK^T unchanged).
    """
    if incoherent:
        from fp8lab.transforms import incoherent_processing

        q, k, _ = incoherent_processing(q, k, seed=seed)
    if scales in ("tensor", "head"):
        qq = quantize_qkv(q, k, v, scales)
        return attention_fa3_fp8(qq.q, qq.k, qq.v, qq.q_descale, qq.k_descale, qq.v_descale, causal=causal,
                                 **fa3_options)
    if scales != "block":
        raise ValueError(f"scales: expected 'tensor', 'head' or 'block', got {scales!r}")
    from fp8lab.scaling import PerBlock

    bn = fa3_options.get("block_n") or fa3_block_n(q.shape[-1], causal=causal)
    qf = _fake_quantized(q, PerBlock(128))
    kf = _fake_quantized(k, PerBlock(bn))
    vf = _fake_quantized(v, PerBlock(bn))
    steps = fa3_options.pop("steps", FA3Steps())
    return attention_fa3_fp8(qf, kf, vf, causal=causal, steps=steps.without("q", "k", "v"), **fa3_options)


def emulation_check(dist: str = "normal", *, seqlen: int, heads: int, head_dim: int, causal: bool = True,
                    seed: int = 0, device: str | torch.device = "cpu") -> dict[str, float]:
    """The emulation's sanity check: rel L2 vs exact attention with every step exact ("every step
    exact": float64 rounding, about 1e-15) and with FA3's FP8 pipeline on per-head-quantized inputs
    ("FA3 FP8")."""
    q, k, v = _inputs(dist, seqlen=seqlen, heads=heads, head_dim=head_dim, seed=seed, device=device)
    qq = quantize_qkv(q, k, v)
    exact = attention_exact(q, k, v, causal=causal)
    all_exact = attention_fa3_fp8(q, k, v, *qq.descales.values(), causal=causal, steps=FA3Steps.exact())
    fp8 = attention_fa3_fp8(qq.q, qq.k, qq.v, *qq.descales.values(), causal=causal)
    return {"every step exact": rel_l2(all_exact, exact), "FA3 FP8": rel_l2(fp8, exact)}


def table3(*, seqlen: int = 2048, heads: int = 8, head_dim: int = 128, seed: int = 0,
           device: str | torch.device = "cpu") -> pd.DataFrame:
    """The FA3 paper's Table 3 (FP8 rows) with our emulation, RMSE vs float64, paper values beside.

    Inputs: the paper's outlier distribution. Rows: per-tensor baseline; FA3 (block
    quantization + incoherent processing); without block quantization (per-tensor +
    incoherent); without incoherent processing (block quantization only). Also our
    per-head (FA3 API) variants, which the paper does not list.
    """
    q, k, v = _inputs(OUTLIERS, seqlen=seqlen, heads=heads, head_dim=head_dim, seed=seed, device=device)
    ref = attention_exact(q, k, v)
    rows = [
        ("FP8 baseline (per-tensor)", dict(scales="tensor")),
        ("FA3 FP8 (block quant + incoherent)", dict(scales="block", incoherent=True)),
        ("FA3 FP8 without block quant", dict(scales="tensor", incoherent=True)),
        ("FA3 FP8 without incoherent processing", dict(scales="block")),
        ("per-head descales (FA3 API)", dict(scales="head")),
        ("per-head descales + incoherent", dict(scales="head", incoherent=True)),
    ]
    out = []
    for name, opts in tqdm(rows, desc="table 3", leave=False):
        err = rmse(fp8_variant(q, k, v, seed=seed, **opts), ref)
        paper = PAPER_TABLE3.get(name)
        out.append({"method": name, "rmse_ours": err, "rmse_paper": paper,
                    "ratio_ours_to_paper": None if paper is None else err / paper})
    df = pd.DataFrame(out)
    base = df.loc[0, "rmse_ours"]
    df["vs_baseline_ours"] = df["rmse_ours"] / base
    df["vs_baseline_paper"] = df["rmse_paper"] / PAPER_TABLE3["FP8 baseline (per-tensor)"]
    return df


def attribution_table(dists: tuple[str, ...], *, seqlen: int, heads: int, head_dim: int, causal: bool = True,
                      accumulator: AccumulatorModel | None = AccumulatorModel(), seed: int = 0,
                      device: str | torch.device = "cpu") -> pd.DataFrame:
    """rel L2 of each step alone and of all steps, per distribution (rows: distribution, columns: step)."""
    _check_dists(dists)
    rows = []
    for dist in tqdm(dists, desc="attribution", leave=False):
        q, k, v = _inputs(dist, seqlen=seqlen, heads=heads, head_dim=head_dim, seed=seed, device=device)
        rows.append({"distribution": dist, **attribute_error(q, k, v, causal=causal, accumulator=accumulator)})
    return pd.DataFrame(rows).set_index("distribution")


def quadrature_gap(attr: pd.DataFrame) -> pd.Series:
    """quadrature_sum / total - 1 per row of `attribution_table`: near 0 where the steps' errors are
    independent and add in quadrature; far from it where they interact."""
    if not {"quadrature_sum", "total"} <= set(attr.columns):
        raise ValueError(f"quadrature_gap: expected attribution_table's columns, got {list(attr.columns)}")
    return attr["quadrature_sum"] / attr["total"] - 1


def cast_cost_table(attr: pd.DataFrame, *, seqlen: int, heads: int, head_dim: int, seed: int = 0,
                    device: str | torch.device = "cpu") -> pd.DataFrame:
    """What each input cast costs its own tensor and what it costs the output, per distribution.

    attr: `attribution_table` of the same distributions, sizes and seed (its q, k, v columns are the
    output's). Index: attr's distributions; columns "q: tensor", "k: tensor", "v: tensor" (rel L2 of
    the per-head e4m3 round trip against the tensor, as `quantize_qkv` casts it), "q: output",
    "k: output", "v: output" (attr's), and "V's cast against Q's and K's": "costs more than either",
    "costs less than either" or "lies between" (on the output).
    """
    rows = {}
    for dist in attr.index:
        q, k, v = _inputs(dist, seqlen=seqlen, heads=heads, head_dim=head_dim, seed=seed, device=device)
        qq = quantize_qkv(q, k, v)
        rows[dist] = {f"{n}: tensor": float(rel_l2(dequantize(x8, d, k.shape[2]), x)) for n, x, x8, d in
                      (("q", q, qq.q, qq.q_descale), ("k", k, qq.k, qq.k_descale), ("v", v, qq.v, qq.v_descale))}
    casts = pd.DataFrame.from_dict(rows, orient="index").join(attr[["q", "k", "v"]].add_suffix(": output"))
    casts["V's cast against Q's and K's"] = [
        "costs more than either" if r["v: output"] > max(r["q: output"], r["k: output"]) else
        "costs less than either" if r["v: output"] < min(r["q: output"], r["k: output"]) else "lies between"
        for _, r in casts.iterrows()]
    return casts.rename_axis(attr.index.name)


def mask_effect(dist: str = "normal", *, seqlen: int, heads: int, head_dim: int, seed: int = 0,
                device: str | torch.device = "cpu") -> pd.DataFrame:
    """What the causal mask does to the input casts' costs (exact accumulator, `attribution_table`).

    Index "causal", "non-causal"; columns q, k, v (rel L2 of each cast alone vs exact attention) and
    "q, k mean / v": the mean of Q's and K's costs over V's.
    """
    rows = {}
    for name, causal in (("causal", True), ("non-causal", False)):
        row = attribution_table((dist,), seqlen=seqlen, heads=heads, head_dim=head_dim, causal=causal,
                                accumulator=None, seed=seed, device=device).loc[dist, ["q", "k", "v"]].astype(float)
        rows[name] = {**row.to_dict(), "q, k mean / v": (row["q"] + row["k"]) / 2 / row["v"]}
    return pd.DataFrame.from_dict(rows, orient="index")


def mask_effect_answers(effect: pd.DataFrame, tolerance: float = 0.05) -> tuple[set[str], float]:
    """The answers `mask_effect` supports to "without the mask, do Q's and K's casts cost more or
    less, relative to V's?", and the growth of "q, k mean / v" (non-causal over causal).

    {"more"} or {"less"} where the ratio moves by more than `tolerance` (relative), both where it
    moves less (a near-tie that a seed could flip).
    """
    if not tolerance >= 0:
        raise ValueError(f"tolerance: expected a fraction >= 0, got {tolerance!r}")
    growth = float(effect.loc["non-causal", "q, k mean / v"] / effect.loc["causal", "q, k mean / v"])
    if abs(growth - 1) <= tolerance:
        return {"more", "less"}, growth
    return ({"more"} if growth > 1 else {"less"}), growth


def p_cast_thresholds(offsets: tuple[float, ...] = (0, 8), fmt: str = "e4m3fn") -> pd.DataFrame:
    """Where the P cast loses probabilities, for each max offset (P = p / row max * 2^offset).

    One row per offset; columns max_offset, "zero at or below" (log2 of p / row max: values there
    round to 0, half the smallest subnormal being a tie that rounds to even) and "subnormal below"
    (log2 of p / row max: below it P lands among the subnormals, with a fixed absolute step).
    """
    offsets = _offsets(offsets)
    f = get_format(fmt)
    sub, normal = int(math.log2(f.min_subnormal)), int(math.log2(f.min_normal))
    return pd.DataFrame([{"max_offset": off, "zero at or below": sub - 1 - off, "subnormal below": normal - off}
                         for off in offsets])


def max_offset_table(dists: tuple[str, ...], offsets: tuple[float, ...] = (0, 2, 4, 6, 8), *, seqlen: int,
                     heads: int, head_dim: int, seed: int = 0, device: str | torch.device = "cpu") -> pd.DataFrame:
    """rel L2 of the P cast alone and of all steps, for each max offset and distribution (long format)."""
    _check_dists(dists)
    offsets = _offsets(offsets)
    rows = []
    for dist in tqdm(dists, desc="max offset", leave=False):
        q, k, v = _inputs(dist, seqlen=seqlen, heads=heads, head_dim=head_dim, seed=seed, device=device)
        ref = attention_exact(q, k, v)
        qq = quantize_qkv(q, k, v)
        for off in offsets:
            p_only = attention_fa3_fp8(q, k, v, steps=FA3Steps.only("p"), max_offset=off)
            full = attention_fa3_fp8(qq.q, qq.k, qq.v, *qq.descales.values(), max_offset=off)
            rows.append({"distribution": dist, "max_offset": off, "P cast only": rel_l2(p_only, ref),
                         "all steps": rel_l2(full, ref)})
    return pd.DataFrame(rows)


def head_input_range(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The range of each query head's inputs: float64 (heads_q,), the amax over its Q and over its KV
    head's K and V (all batches and tokens). q (batch, seqlen_q, heads_q, d), k/v (batch, seqlen_k,
    heads_kv, d), heads_q a multiple of heads_kv (a GQA group shares its KV head's K and V)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or not k.shape[2] or q.shape[2] % k.shape[2] \
            or k.shape[2] != v.shape[2] or not q.shape[0] == k.shape[0] == v.shape[0] \
            or not q.shape[3] == k.shape[3] == v.shape[3]:
        raise ValueError(f"head_input_range: expected q (b, s, heads_q, d), k/v (b, s, heads_kv, d) with heads_q a "
                         f"multiple of heads_kv (same b and d), got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    group = q.shape[2] // k.shape[2]

    def amax(x: torch.Tensor) -> torch.Tensor:
        return x.detach().abs().to(torch.float64).amax(dim=(0, 1, 3)).cpu()

    return torch.maximum(amax(q), torch.maximum(amax(k), amax(v)).repeat_interleave(group))


SCALING_VARIANTS: tuple[tuple[str, str, bool], ...] = (
    ("per-tensor", "tensor", False), ("per-head", "head", False), ("block", "block", False),
    ("per-tensor + IP", "tensor", True), ("per-head + IP", "head", True), ("block + IP", "block", True))


def scaling_table(dists: tuple[str, ...], *, seqlen: int, heads: int, head_dim: int, causal: bool = True,
                  seed: int = 0, device: str | torch.device = "cpu") -> pd.DataFrame:
    """rel L2 for per-tensor / per-head / block scales, with and without incoherent processing (IP).

    One row per (distribution, scales), long format. Columns: rel_l2 (the whole output: it pools all
    heads, so large heads dominate it), rel_l2_median_head, rel_l2_worst_head, worst_head (its index)
    and worst_head_range_rank (1: the head with the widest input range, `heads`: the narrowest; by
    `head_input_range`), rel_l2_smallest_head and smallest_head: the head with the narrowest range,
    the one a per-tensor scale pushes furthest down e4m3's range.
    """
    _check_dists(dists)
    rows = []
    for dist in tqdm(dists, desc="scaling", leave=False):
        q, k, v = _inputs(dist, seqlen=seqlen, heads=heads, head_dim=head_dim, seed=seed, device=device)
        ref = attention_exact(q, k, v, causal=causal)
        ranges = head_input_range(q, k, v)
        smallest = int(ranges.argmin())
        rank = ranges.argsort(descending=True).argsort() + 1  # 1: the widest range
        for name, scales, ip in SCALING_VARIANTS:
            out = fp8_variant(q, k, v, scales=scales, incoherent=ip, causal=causal, seed=seed)
            per_head = rel_l2(out, ref, per_head=True)
            rows.append({"distribution": dist, "scales": name, "rel_l2": rel_l2(out, ref),
                         "rel_l2_worst_head": float(per_head.max()), "rel_l2_median_head": float(per_head.median()),
                         "worst_head": int(per_head.argmax()), "worst_head_range_rank": int(rank[per_head.argmax()]),
                         "rel_l2_smallest_head": float(per_head[smallest]),
                         "smallest_head": smallest})
    return pd.DataFrame(rows)


def scaling_by_head(sc: pd.DataFrame) -> pd.DataFrame:
    """`scaling_table`'s whole-output, worst-head and smallest-range-head errors side by side.

    Index (distribution, scales) in sc's order; columns "whole output", "worst head", "smallest-range
    head" (rel L2 vs exact), and "worst head's range rank" (1: the worst head is the widest-range one).
    """
    need = {"distribution", "scales", "rel_l2", "rel_l2_worst_head", "worst_head_range_rank", "rel_l2_smallest_head"}
    if not need <= set(sc.columns):
        raise ValueError(f"scaling_by_head: expected scaling_table's columns, missing {sorted(need - set(sc.columns))}")
    out = sc.set_index(["distribution", "scales"])
    table = out[["rel_l2", "rel_l2_worst_head", "rel_l2_smallest_head"]].set_axis(
        ["whole output", "worst head", "smallest-range head"], axis=1)
    table["worst head's range rank"] = out["worst_head_range_rank"]
    return table


def smallest_head_gain(sc: pd.DataFrame, finer: str = "per-head", coarser: str = "per-tensor") -> pd.DataFrame:
    """What a finer scale buys the smallest-range head and the whole output, per distribution.

    Index distribution; columns f"smallest head, {coarser}", f"smallest head, {finer}", "smallest head
    gain" (coarser / finer: > 1 where the finer scale helps that head), and the same three for the
    "whole output".
    """
    by = scaling_by_head(sc)
    missing = {finer, coarser} - set(by.index.get_level_values("scales"))
    if missing:
        raise ValueError(f"smallest_head_gain: scales {sorted(missing)} not in the table")
    rows = {}
    for dist in dict.fromkeys(by.index.get_level_values("distribution")):
        row = {}
        for what, col in (("smallest head", "smallest-range head"), ("whole output", "whole output")):
            c, f = by.loc[(dist, coarser), col], by.loc[(dist, finer), col]
            row |= {f"{what}, {coarser}": c, f"{what}, {finer}": f, f"{what} gain": c / f}
        rows[dist] = row
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("distribution")


def long_context_table(seqlens: tuple[int, ...], *, queries: int = 16, heads: int = 2, head_dim: int = 128,
                       mantissa_bits: int = HOPPER_FP8_MMA.mantissa_bits, v_offset: float = 1.0, seed: int = 0,
                       device: str | torch.device = "cpu") -> pd.DataFrame:
    """rel L2 vs exact against the number of keys: fp32 accumulation, the FP8 MMA accumulator model,
    and two-level accumulation flushed every key block (vLLM).

    `queries` query rows attend to all keys (non-causal); V gets `v_offset` added so the
    accumulated P.V grows with the context as it does with real value vectors.
    """
    seqlens = check_values("seqlens", seqlens, "(1024, 8192)")
    rows = []
    bn = fa3_block_n(head_dim)
    models = {"fp32 accumulate": None,
              f"FP8 MMA, {mantissa_bits} bits (upstream FA3)": AccumulatorModel(mantissa_bits, apply_to_qk=False),
              "two-level, flush every block (vLLM)": AccumulatorModel(mantissa_bits, promote_every=bn, apply_to_qk=False)}
    for sk in tqdm(seqlens, desc="long context", leave=False):
        q, k, v = _inputs("normal", seqlen=queries, seqlen_k=sk, heads=heads, head_dim=head_dim, seed=seed,
                          device=device)
        v = v + v_offset
        ref = attention_exact(q, k, v)
        qq = quantize_qkv(q, k, v)
        for name, model in models.items():
            out = attention_fa3_fp8(qq.q, qq.k, qq.v, *qq.descales.values(), accumulator=model)
            rows.append({"seqlen_k": sk, "accumulation": name, "rel_l2": rel_l2(out, ref)})
    return pd.DataFrame(rows)


def load_fidelity(path: str | Path) -> dict:
    """The recorded fidelity measurement (scripts/gpu_fidelity.py output)."""
    return json.loads(Path(path).read_text())


FIDELITY_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_fidelity.py"


def measure_fidelity(out: str | Path, *, budget_s: float = 120.0, vllm_lib: str | Path | None = None,
                     dry_run: bool = False) -> dict:
    """Measure the emulation against production FA3 now (`scripts/gpu_fidelity.py`) and load the record.

    Needs a Hopper GPU with fa3-fwd (and `vllm_lib`, vLLM's `_vllm_fa3_C.abi3.so`, for its kernel
    too) and a clone of fp8lab, which holds the script. `dry_run`: tiny shapes on the CPU with the
    emulation standing in for FA3 (checks the plumbing, measures nothing). The script runs in its
    own process (a crash in a production kernel cannot take the caller down). Raises
    FileNotFoundError without the script, and RuntimeError, with the script's last lines or notes,
    when it fails or finds no FA3 kernel to measure.
    """
    if not budget_s > 0:
        raise ValueError(f"budget_s: expected seconds > 0, got {budget_s!r}")
    if not FIDELITY_SCRIPT.is_file():
        raise FileNotFoundError(f"measure_fidelity needs {FIDELITY_SCRIPT}, which comes with a clone of fp8lab "
                                "(an installed package has no scripts/)")
    out = Path(out)
    out.unlink(missing_ok=True)
    cmd = [sys.executable, str(FIDELITY_SCRIPT), "--out", str(out), "--budget-s", str(budget_s)]
    if vllm_lib is not None:
        cmd += ["--vllm-lib", str(vllm_lib)]
    if dry_run:
        cmd.append("--dry-run")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not out.is_file():
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
        raise RuntimeError(f"{FIDELITY_SCRIPT.name} exited with {proc.returncode}"
                           f"{'' if out.is_file() else ' and wrote no record'}:\n{tail}")
    record = load_fidelity(out)
    if not any(case.get("providers") for case in record["cases"]):
        raise RuntimeError("no production FA3 kernel was measured: " + "; ".join(record.get("notes", [])))
    return record


@dataclass
class FidelitySource:
    """The fidelity record notebook 05 (f) shows, and where it came from.

    shown: the live measurement where one was made, else the recorded one, else None; recorded: the
    record file's content or None (it holds the accumulator study a live run lacks); live: whether
    `shown` was measured now; note: why a live measurement that was asked for was not made.
    """

    shown: dict | None
    recorded: dict | None
    live: bool
    note: str | None = None


def fidelity_source(record_path: str | Path, *, device: str | torch.device = "cpu", measure_live: bool = True,
                    budget_s: float = 120.0, measure: Callable[..., dict] | None = None) -> FidelitySource:
    """Measure the emulation against production FA3 now where that can run, else load the record.

    A live measurement (`measure_fidelity` in a fresh temporary folder, with vLLM's FA3 library where
    `fp8lab.backends.fetch` has it) runs only when `measure_live` and `device` is a Hopper GPU
    (compute capability 9.x); its FileNotFoundError or RuntimeError becomes `note`. `measure`
    replaces `measure_fidelity` (tests).
    """
    path = Path(record_path)
    recorded = load_fidelity(path) if path.exists() else None
    device = torch.device(device)
    live, note = None, None
    if measure_live and device.type == "cuda" and torch.cuda.get_device_capability(device)[0] == 9:
        from fp8lab.backends import fetch

        vllm_lib, _ = fetch.resolve_library()  # vLLM's FA3 library, if fetched and its checksum matches
        try:
            live = (measure or measure_fidelity)(Path(tempfile.mkdtemp()) / "fidelity.json", budget_s=budget_s,
                                                 vllm_lib=vllm_lib)
        except (FileNotFoundError, RuntimeError) as e:
            note = str(e)
    return FidelitySource(live or recorded, recorded, live is not None, note)


def _variant_for(provider: str, case: dict, variants: dict, model: str) -> str | None:
    """The emulation variant that models `provider`.

    model="plain": fp32 accumulation with the provider's block size (vLLM's differs).
    model="hopper": plus the measured FP8 MMA accumulator (two-level for vLLM).
    """
    vllm = provider.startswith("vllm")
    if model == "hopper":
        names = ("acc_m13_promote_block_vllm_bn", "acc_m13_promote_block") if vllm else ("acc_m13",)
    elif model == "plain":
        bn = fa3_block_n(case["head_dim"], causal=case["causal"], flavor="vllm")
        names = ("vllm_block_n", f"block_n={bn}", "default") if vllm else ("default",)
    else:
        raise ValueError(f"model: expected 'plain' or 'hopper', got {model!r}")
    return next((n for n in names if n in variants), None)


def fidelity_table(record: dict, model: str = "plain") -> pd.DataFrame:
    """One row per (provider, case): FA3's error vs exact, and the emulation's distance to FA3.

    ratio = rel_l2(emulation, FA3) / rel_l2(FA3, exact) (target < 0.1), for the emulation
    variant that models the provider (`model`: "plain" or "hopper", see `_variant_for`);
    best_variant is the variant with the smallest ratio among all that were swept.
    """
    _check_record(record)
    if model not in ("plain", "hopper"):  # checked here too: a record without cases never asks _variant_for
        raise ValueError(f"model: expected 'plain' or 'hopper', got {model!r}")
    rows = []
    for c in record.get("cases", []):
        for prov, r in c.get("providers", {}).items():
            variant = _variant_for(prov, c, r.get("variants", {}), model)
            if variant is None:
                continue
            best_name, best = min(r["variants"].items(), key=lambda kv: kv[1]["ratio"])
            rows.append({
                "provider": prov, "dist": c["dist"], "head_dim": c["head_dim"], "causal": c["causal"],
                "heads": f"{c['heads_q']}/{c['heads_kv']}", "seqlen_q/k": f"{c['seqlen_q']}/{c['seqlen_k']}",
                "fa3_err_vs_exact": r["err_vs_exact"], "fa3_err_vs_exact_deq": r["err_vs_exact_deq"],
                "variant": variant, "emu_vs_fa3": r["variants"][variant]["rel_l2_vs_provider"],
                "ratio": r["variants"][variant]["ratio"],
                "bitwise_equal": r["variants"][variant]["bitwise_equal_fraction"],
                "best_variant": best_name, "best_ratio": best["ratio"],
            })
    return pd.DataFrame(rows)


def fidelity_max_ratio(table: pd.DataFrame, column: str = "ratio") -> dict[str, float]:
    """The largest `column` of a `fidelity_table` (or `accumulator_comparison`) per provider."""
    if not len(table):
        return {}
    return {str(k): float(v) for k, v in table.groupby("provider")[column].max().items()}


def recorded_fa3_error(record: dict | None, dist: str = "normal", provider: str = "fa3-fwd") -> dict | None:
    """FA3's own error vs exact attention in a fidelity record, over its cases of `dist` for `provider`:
    {"min", "max" (rel L2), "head_dims", "seqlen_k" (sorted lists)}; None without a record or such cases."""
    if record is None:
        return None
    table = fidelity_table(record, "plain")
    if not len(table):
        return None
    rows = table[(table["dist"] == dist) & (table["provider"] == provider)]
    if not len(rows):
        return None
    return {"min": float(rows["fa3_err_vs_exact"].min()), "max": float(rows["fa3_err_vs_exact"].max()),
            "head_dims": sorted(int(d) for d in set(rows["head_dim"])),
            "seqlen_k": sorted({int(s.split("/")[1]) for s in rows["seqlen_q/k"]})}


def accumulator_study(*records: dict | None) -> dict:
    """The first of `records` that holds the accumulator-model study of every case ("hopper_all", else
    the four-case "accumulator_study"), or {} when none does. A live `measure_fidelity` run has none."""
    for record in records:
        if record is not None:
            _check_record(record)
        study = (record or {}).get("hopper_all") or (record or {}).get("accumulator_study")
        if study:
            return study
    return {}


def accumulator_comparison(study: dict) -> pd.DataFrame:
    """The emulation with Hopper's FP8 MMA model beside the plain one, per (provider, case) of an
    `accumulator_study`: columns provider, dist, head_dim, causal, heads, ratio_hopper_mma,
    bitwise_equal_hopper_mma, ratio_plain, bitwise_equal_plain (see `fidelity_table`); empty for {}."""
    keys = ["provider", "dist", "head_dim", "causal", "heads"]
    tables = [fidelity_table(study, model) for model in ("hopper", "plain")]
    if not study or not all(len(t) for t in tables):
        return pd.DataFrame(columns=keys + ["ratio_hopper_mma", "bitwise_equal_hopper_mma", "ratio_plain",
                                            "bitwise_equal_plain"])
    hopper, plain = (t[keys + ["ratio", "bitwise_equal"]] for t in tables)
    return hopper.merge(plain, on=keys, suffixes=("_hopper_mma", "_plain"))


# The long-context rows notebook 05 (f) shows: both production kernels, and the emulation adding in
# fp32, with the 13-bit MMA model over every block (upstream FA3), and flushed every vLLM key block.
LONG_CONTEXT_SHOWN = ("fa3-fwd", "vllm-fa3", "emulation default", "emulation acc_m13_pv",
                      "emulation acc_m13_promote_block_vllm_bn")


def long_context_hardware(record: dict | None, who: tuple[str, ...] = LONG_CONTEXT_SHOWN
                          ) -> tuple[pd.DataFrame, dict[str, dict[str, float]]]:
    """`long_context_record` limited to the rows `who` names, and the same as figures to record:
    {"dist/who": {"seqlen_k": rel L2}} (missing lengths left out). Empty for a record without them."""
    lr = long_context_record(record) if record is not None else pd.DataFrame()
    if not len(lr):
        return lr, {}
    show = lr[lr.index.get_level_values("who").isin(who)]
    figures = {f"{d}/{w}": {str(k): float(v) for k, v in row.dropna().items()} for (d, w), row in show.iterrows()}
    return show, figures


def long_context_record(record: dict) -> pd.DataFrame:
    """Long-context rows of a fidelity record: rel L2 vs exact for each provider and emulation variant."""
    _check_record(record)
    rows = []
    cases = record.get("long_context", []) + record.get("accumulator_study", {}).get("long_context", [])
    for c in cases:
        for prov, r in c.get("providers", {}).items():
            if "err_vs_exact" in r:
                rows.append({"dist": c["dist"], "seqlen_k": c["seqlen_k"], "who": prov, "rel_l2": r["err_vs_exact"]})
        for name, e in c.get("emulation", {}).items():
            rows.append({"dist": c["dist"], "seqlen_k": c["seqlen_k"], "who": f"emulation {name}",
                         "rel_l2": e["err_vs_exact"]})
    if not rows:
        return pd.DataFrame()
    return pd.DataFrame(rows).pivot_table(index=["dist", "who"], columns="seqlen_k", values="rel_l2", aggfunc="last")


def decode_split_record(results_dir: str | Path, name: str = "decode_fidelity_validate.json") -> pd.DataFrame:
    """The H200's check of FA3's split-KV decode against vLLM's FA3 library (`scripts/gpu_decode_fidelity.py`,
    its validation run, `decode_fidelity_validate.json`), one row per (case, num_splits, sequence).

    Columns: case, head_dim, heads_kv, block_n (the emulation's key block), num_splits (what the call
    passed the library: 0 is FA3's own heuristic, vLLM's eager call), sequence (its index in the
    batch), seqlen_k, predicted_splits (`fp8lab.reference.fa3_decode_splits` for that call),
    equal_at_predicted and equal_without_split: the fraction of the sequence's bf16 outputs equal bit
    for bit to the library's, with the emulation split as predicted and not split at all.
    """
    path = Path(results_dir) / name
    record = json.loads(path.read_text())
    if "context" not in record or "validation" not in record:
        raise ValueError(f"{path}: expected a record with 'context' and 'validation', got keys {sorted(record)}")
    rows = []
    for case in record["validation"]:
        for passed, got in case["by_num_splits"].items():
            per_seq = zip(case["lens"], got["predicted_splits"], got["equal_at_predicted"], got["equal_without_split"],
                          strict=True)
            rows += [{"case": case["case"], "head_dim": case["head_dim"], "heads_kv": case.get("heads_kv", record.get("heads_kv")),
                      "block_n": case["block_n"], "num_splits": int(passed), "sequence": i, "seqlen_k": n,
                      "predicted_splits": k, "equal_at_predicted": at, "equal_without_split": without}
                     for i, (n, k, at, without) in enumerate(per_seq)]
    return pd.DataFrame(rows)

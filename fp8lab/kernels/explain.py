"""Helpers that explain the FP8 kernels (notebooks 02, 07, 08 and 09): each FP8 step in numbers, the
one-pass delayed-scaling kernel against the reference, and the tuning record read back from results/h200.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable
from pathlib import Path

import pandas as pd
import torch
import triton
import triton.language as tl

from fp8lab.bench import (check_one_version, load_results, long_context_headline, mbarrier_waits, read_clock_log,
                          read_ncu_raw, read_ncu_sass, records_frame)
from fp8lab.env import triton_interpret
from fp8lab.formats import cast_to_fp8, get_format
from fp8lab.layout import check_attention_inputs, check_count, check_softmax_scale
from fp8lab.kernels import attention as _attention
from fp8lab.kernels.attention import AttentionConfig, key_order
from fp8lab.kernels.attention_ws import WsConfig, key_ordered_vt
from fp8lab.kernels.fp8_rounding import round_to_bf16, round_to_e4m3
from fp8lab.kernels.quantize import quantize_delayed
from fp8lab.metrics import rel_l2, ulps_apart
from fp8lab.reference.exact import attention_exact, dequantize
from fp8lab.records import version_key
from fp8lab.reference.fa3 import FA3Steps, attention_fa3_fp8
from fp8lab.scaling import ScaleStrategy, quantize

__all__ = ["api_overhead", "cast_demo", "causal_schedule_table", "consumer_registers", "correctness_record",
           "delayed_kernel_check", "describe_transpose_v", "fetched_counts", "flush_register_table",
           "folded_scale_error", "kernel_agreement", "kernel_gain", "kernel_ratios", "key_order_values",
           "key_ordered_vt_landing", "long_context_table", "max_offset_errors", "max_offset_sinks",
           "online_softmax_check", "p_cast_cost", "p_grid_fractions", "p_register_layout",
           "persistent_schedule", "pseudo_code", "pv_accumulation", "pv_accumulation_summary",
           "pv_flush_kept", "quant_size_table", "quant_sizes", "quant_split_table", "register_carry_table",
           "sink_inputs", "transpose_v_ratios", "transpose_v_summary", "transposer_keys", "tuning_record",
           "tuning_table", "v10_record", "v11_record", "v12_consumers_record", "v12_record",
           "v19_persistent_record", "v20_dynamic_record", "v20_gains", "v21_causal_grids",
           "v22_quant_profile", "v23_after_compile", "v23_swing", "v24_api_grid", "v24_v_layout", "v_layout_costs",
           "ws_record", "ws_table", "flush_registers", "pv_flush", "transpose_v_forms"]


def _scores(q, k, q_descale, k_descale, softmax_scale):
    """Exact float64 scores (batch, heads_q, sq, sk) of FP8 q, k with descales, and the head dim."""
    shape = check_attention_inputs(q, k, k, q_descale=q_descale, k_descale=k_descale)
    qd = dequantize(q, q_descale, shape.heads_kv)
    kd = dequantize(k, k_descale, shape.heads_kv).repeat_interleave(shape.group_size, dim=2)
    scale = check_softmax_scale(softmax_scale, shape.head_dim)  # NaN, 0 or a negative scale: NaN or wrong fractions
    return torch.einsum("bqhd,bkhd->bhqk", qd, kd) * scale


def folded_scale_error(q, k, q_descale, k_descale, softmax_scale=None) -> float:
    """Max relative difference between scores computed as FA3 does (raw e4m3 codes, descales
    folded into the scale) and on dequantized inputs: zero up to float64 rounding, because
    a per-(batch, kv head) descale factors out of every dot product. A descale of None is 1."""
    ref = _scores(q, k, q_descale, k_descale, softmax_scale)  # checks the descales before they are used below
    codes = _scores(q, k, None, None, softmax_scale)
    ones = torch.ones(q.shape[0], k.shape[2], device=q.device)
    qd, kd = (ones if d is None else d for d in (q_descale, k_descale))
    folded = codes * (qd.double() * kd.double()).repeat_interleave(q.shape[2] // k.shape[2], dim=1)[:, :, None, None]
    return float(((folded - ref).abs().max() / ref.abs().max()).item())


def p_grid_fractions(q, k, q_descale=None, k_descale=None, softmax_scale=None,
                     max_offsets=(0.0, 8.0)) -> pd.DataFrame:
    """Where P = 2^offset * exp(s - rowmax) lands on the e4m3 grid, for each max offset.

    Uses the final row max (the online softmax's last state). Columns: max_offset,
    zero (underflows to 0), subnormal (below 2^-6, fewer than 3 mantissa bits), normal,
    and p_rel_err: ||e4m3(P) - P|| / ||P|| (relative L2 error of the P cast alone).
    """
    s = _scores(q, k, q_descale, k_descale, softmax_scale)
    p1 = torch.exp(s - s.amax(dim=-1, keepdim=True))
    tiny = get_format("e4m3fn").min_normal
    rows = []
    for off in max_offsets:
        p = p1 * 2.0 ** off
        p8 = cast_to_fp8(p.float()).double()
        rows.append(dict(
            max_offset=off,
            zero=float((p8 == 0).double().mean()),
            subnormal=float(((p8 > 0) & (p8 < tiny)).double().mean()),
            normal=float((p8 >= tiny).double().mean()),
            p_rel_err=float((p8 - p).norm() / p.norm()),
        ))
    return pd.DataFrame(rows)


def pseudo_code() -> str:
    """The Triton kernel's algorithm in pseudo-code, as its module docstring states it."""
    doc = _attention.__doc__ or ""
    if "Pseudo-code" not in doc or "The accumulator registers" not in doc:
        raise RuntimeError("fp8lab.kernels.attention's docstring lost its pseudo-code section")
    return doc.split("Pseudo-code")[1].split("::", 1)[1].split("The accumulator registers")[0]


def online_softmax_check(q, k, v, q_descale=None, k_descale=None, v_descale=None, *, causal: bool = False,
                         block_ns: tuple[int, ...] = (16, 32, 128)) -> pd.DataFrame:
    """The online softmax is softmax: FA3's block-by-block algorithm with every FP8 rounding off
    (`FA3Steps.exact()`), in float64, against exact attention, per key block and visiting order.
    Columns: block_n, order ("last to first", FA3's, or "first to last"), max_abs_diff."""
    exact = attention_exact(q, k, v, q_descale=q_descale, k_descale=k_descale, v_descale=v_descale, causal=causal)
    rows = []
    for block_n in block_ns:
        for reverse in (True, False):
            out = attention_fa3_fp8(q, k, v, q_descale, k_descale, v_descale, causal=causal, block_n=block_n,
                                    reverse_blocks=reverse, steps=FA3Steps.exact())
            rows.append(dict(block_n=block_n, order="last to first" if reverse else "first to last",
                             max_abs_diff=float((out.double() - exact.double()).abs().max())))
    return pd.DataFrame(rows)


def sink_inputs(batch: int, seqlen_q: int, seqlen_k: int, heads_q: int, heads_kv: int, head_dim: int,
                gap: float, generator: torch.Generator, sink: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """e4m3fn q (batch, seqlen_q, heads_q, head_dim), k, v (batch, seqlen_k, heads_kv, head_dim) for
    unit descales, N(0, 1) but for one dominant key: every query scores key `sink` about `gap` nats
    above a typical key (q's first channel is 2, k's is 0 except that key's, gap * sqrt(head_dim) / 2)."""
    if generator is not None and not isinstance(generator, torch.Generator):  # a seed: randn's "invalid combination"
        raise TypeError(f"generator: expected a torch.Generator (e.g. torch.Generator().manual_seed(0)), got "
                        f"{type(generator).__name__}")
    if not -seqlen_k <= sink < seqlen_k:
        raise ValueError(f"sink: expected a key index in [-{seqlen_k}, {seqlen_k}) (negative from the end), got {sink}")
    q = torch.randn(batch, seqlen_q, heads_q, head_dim, generator=generator)
    k, v = (torch.randn(batch, seqlen_k, heads_kv, head_dim, generator=generator) for _ in range(2))
    q[..., 0] = 2.0
    k[..., 0] = 0.0
    k[:, sink, :, 0] = gap * head_dim ** 0.5 / 2.0
    return cast_to_fp8(q), cast_to_fp8(k), cast_to_fp8(v)


def max_offset_sinks(attention: Callable, gaps: tuple[float, ...] = (0.0, 4.0, 6.0, 8.0), *,
                     sinks: tuple[int, ...] = (0, -1), batch: int = 1, seqlen_q: int, seqlen_k: int, heads_q: int,
                     heads_kv: int, head_dim: int, seed: int = 0, device: str | torch.device = "cpu",
                     max_offsets: tuple[float, float] = (0.0, 8.0)) -> pd.DataFrame:
    """The max offset's effect on attention with one dominant key (`sink_inputs`), one row per
    (sink position, gap).

    attention(q, k, v, q_descale, k_descale, v_descale, max_offset=...) is the kernel under test
    (`fp8_attention`, or `attention_fa3_fp8` with a `block_n`). sinks: key indices (negative from
    the end). Every row draws the same values (`seed`); only the sink's score moves. Columns: sink
    (its key index), gap, sink_weight (its mean softmax weight, float64), the relative L2 error
    against exact float64 attention at each max offset, and their ratio (first offset / second).
    """
    if len(max_offsets) != 2:
        raise ValueError(f"max_offsets: expected two offsets (the ratio is the first's error over the second's), "
                         f"got {tuple(max_offsets)}")
    rows = []
    for sink in sinks:
        for gap in gaps:
            q, k, v = (t.to(device) for t in sink_inputs(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, gap,
                                                         torch.Generator().manual_seed(seed), sink))
            ones = torch.ones(batch, heads_kv, device=device)
            exact = attention_exact(q, k, v, q_descale=ones, k_descale=ones, v_descale=ones)
            weight = torch.softmax(_scores(q, k, ones, ones, None), -1)[..., sink].mean()
            row = dict(sink=sink % seqlen_k, gap=gap, sink_weight=float(weight))
            for off in max_offsets:
                out = attention(q, k, v, ones, ones, ones, max_offset=off)
                row[f"rel_l2, offset {off:g}"] = float(rel_l2(out, exact))
            row["ratio"] = row[f"rel_l2, offset {max_offsets[0]:g}"] / row[f"rel_l2, offset {max_offsets[1]:g}"]
            rows.append(row)
    return pd.DataFrame(rows)


def kernel_agreement(out: torch.Tensor, emulation: torch.Tensor, exact: torch.Tensor) -> pd.DataFrame:
    """How close a kernel's output is to the emulation and both to exact attention, all of one shape.

    out, emulation: the kernel's and the emulation's outputs (bf16 or fp16); exact: exact attention on
    the same FP8 inputs (any float dtype). One row per pair ("kernel vs emulation", "emulation vs
    exact", "kernel vs exact"). Columns: pair, rel_l2 (relative L2 distance, the second as the
    reference), elements, bitwise_equal (elements with identical bits) and max_ulps (the largest
    distance in representable values); the last two only where both tensors share a 16-bit float
    dtype, missing (pd.NA) otherwise.
    """
    if not (out.shape == emulation.shape == exact.shape):
        raise ValueError(f"expected three outputs of one shape, got {tuple(out.shape)}, {tuple(emulation.shape)} "
                         f"and {tuple(exact.shape)}")
    rows = []
    for pair, x, ref in (("kernel vs emulation", out, emulation), ("emulation vs exact", emulation, exact),
                         ("kernel vs exact", out, exact)):
        row = dict(pair=pair, rel_l2=float(rel_l2(x, ref)), elements=x.numel(), bitwise_equal=None, max_ulps=None)
        if x.dtype == ref.dtype and x.dtype in (torch.bfloat16, torch.float16):
            ulps = ulps_apart(x, ref)
            row.update(bitwise_equal=int((ulps == 0).sum()), max_ulps=int(ulps.max()) if ulps.numel() else 0)
        rows.append(row)
    return pd.DataFrame(rows).astype({"bitwise_equal": "Int64", "max_ulps": "Int64"})


def max_offset_errors(attention: Callable, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      q_descale: torch.Tensor | None = None, k_descale: torch.Tensor | None = None,
                      v_descale: torch.Tensor | None = None, *, causal: bool = False,
                      max_offsets: tuple[float, ...] = (0.0, 8.0)) -> pd.DataFrame:
    """The output's error against exact float64 attention with each max offset.

    attention(q, k, v, q_descale, k_descale, v_descale, causal=..., max_offset=...) is the kernel under
    test (`fp8_attention`, or `attention_fa3_fp8` with a `block_n`); q (batch, seqlen_q, heads_q, d), k, v
    (batch, seqlen_k, heads_kv, d) e4m3fn, descales float32 (batch, heads_kv) or None (1). Columns:
    max_offset, rel_l2_vs_exact.
    """
    exact = attention_exact(q, k, v, q_descale=q_descale, k_descale=k_descale, v_descale=v_descale, causal=causal)
    return pd.DataFrame([
        dict(max_offset=off, rel_l2_vs_exact=float(rel_l2(
            attention(q, k, v, q_descale, k_descale, v_descale, causal=causal, max_offset=off), exact)))
        for off in max_offsets])


def p_cast_cost(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_descale: torch.Tensor | None = None,
                k_descale: torch.Tensor | None = None, v_descale: torch.Tensor | None = None, *,
                causal: bool = False, block_n: int) -> pd.DataFrame:
    """What the P cast costs: the FA3 emulation (blocks of `block_n` keys) with and without its e4m3
    cast of P, both without the bf16 output cast, against exact float64 attention on the same FP8
    inputs (q, k, v e4m3fn as `attention_fa3_fp8` takes them). Columns: p_cast ("with the P cast",
    "without the P cast"), rel_l2_vs_exact."""
    exact = attention_exact(q, k, v, q_descale=q_descale, k_descale=k_descale, v_descale=v_descale, causal=causal)
    rows = []
    for name, steps in (("with the P cast", FA3Steps().without("output")),
                        ("without the P cast", FA3Steps().without("output", "p"))):
        out = attention_fa3_fp8(q, k, v, q_descale, k_descale, v_descale, causal=causal, block_n=block_n,
                                steps=steps)
        rows.append(dict(p_cast=name, rel_l2_vs_exact=float(rel_l2(out, exact))))
    return pd.DataFrame(rows)


def correctness_record(results_dir: str | Path, version: str = "v2", variant: str = "transposed") -> pd.DataFrame:
    """The record's GPU correctness check of one kernel version: per case, the kernel's and FA3's
    relative L2 distance from the emulation, and each as a fraction of the emulation's own error
    (`ratio` = ours_vs_emu / emu_vs_exact, `fa3_ratio` = fa3_vs_emu / emu_vs_exact)."""
    corr = records_frame(results_dir, "correctness")
    corr = corr[(corr["version"] == version) & (corr["variant"] == variant)].copy()
    if corr.empty:
        raise ValueError(f"no correctness record for version {version!r}, variant {variant!r} in {results_dir}")
    corr["fa3_ratio"] = corr["fa3_vs_emu"] / corr["emu_vs_exact"]
    return corr[["case", "ours_vs_emu", "emu_vs_exact", "ratio", "fa3_vs_emu", "fa3_ratio"]].reset_index(drop=True)


def tuning_record(results_dir: str | Path) -> pd.DataFrame:
    """Best TFLOP/s of each version's sweep at 2 x 8192 x 32 heads, per (head_dim, causal),
    pre-transposed V. Columns: version, setting, tflops, config."""
    sweep = records_frame(results_dir, "sweep")
    sweep = sweep[sweep["tflops"].notna() & (sweep["layout"] == "transposed")]
    best = sweep.loc[sweep.groupby(["version", "head_dim", "causal"])["tflops"].idxmax()]
    best = best.assign(setting=[f"d={int(d)}{' causal' if c else ''}" for d, c in zip(best["head_dim"], best["causal"])])
    return best[["version", "setting", "tflops", "config"]].reset_index(drop=True)


def tuning_table(record: pd.DataFrame) -> pd.DataFrame:
    """`tuning_record` as a table: one row per setting (in the record's order), one column per version,
    the best TFLOP/s; NaN where a version's sweep did not time that setting."""
    return record.pivot_table(index="setting", columns="version", values="tflops", sort=False)


def ws_record(results_dir: str | Path) -> pd.DataFrame:
    """The warp-specialized Gluon kernel (v8a, v8b, v8) against the Triton kernel's default and
    fa3-fwd FP8 on the grid, each from its own run. One row per (version, case, kernel):
    tflops, and ratio = tflops / fa3-fwd FP8 in the same run; "ws" is the best ws config."""
    df = records_frame(results_dir, "ws")
    df = df[(df["section"] == "speed") & df["tflops"].notna()]
    fa3 = df[df["provider"] == "fa3-fwd FP8"].set_index(["version", "case"])["tflops"]
    rows = []
    for (version, case), g in df.groupby(["version", "case"], sort=False):
        if (version, case) not in fa3.index:
            continue
        ws = g[g["provider"] == "ws"]
        tri = g[g["provider"] == "default"]
        for kernel, part in (("ws (Gluon)", ws), ("Triton default", tri)):
            if len(part):
                best = part.loc[part["tflops"].idxmax()]
                rows.append(dict(version=version, case=case, head_dim=int(best["head_dim"]), kernel=kernel,
                                 config=best["config"], tflops=float(best["tflops"]),
                                 ratio=float(best["tflops"]) / float(fa3[(version, case)])))
    return pd.DataFrame(rows)


def ws_table(record: pd.DataFrame) -> pd.DataFrame:
    """`ws_record` as a table: one row per case, one column per (version, kernel), the ratio to FA3 FP8
    of the same run rounded to two decimals."""
    return record.pivot_table(index="case", columns=["version", "kernel"], values="ratio", sort=False).round(2)


def _round_medians(path: Path, names: dict[str, str]) -> pd.DataFrame:
    """Medians over a run's interleaved rounds of the providers in `names` (renamed to its values,
    in its order), with ratio = tflops / fa3-fwd FP8 of the same case and run."""
    data = load_results(path)
    df = pd.DataFrame([r for r in data["rows"] if r.get("section") == "speed" and "tflops" in r])
    med = df.groupby(["case", "provider", "config"], sort=False).agg(
        tflops=("tflops", "median"), head_dim=("head_dim", "first"), causal=("causal", "first")).reset_index()
    fa3 = med[med["provider"] == "fa3-fwd FP8"].set_index("case")["tflops"]
    key = med["provider"] + ":" + med["config"]
    pick = key.map(names).fillna(med["provider"].map(names))
    out = med[pick.notna()].assign(kernel=pick[pick.notna()])
    out = out.assign(ratio=out["tflops"].to_numpy() / fa3.reindex(out["case"]).to_numpy(),
                     kernel=pd.Categorical(out["kernel"], categories=list(dict.fromkeys(names.values())),
                                           ordered=True))
    order = {case: i for i, case in enumerate(dict.fromkeys(med["case"]))}
    out = out.sort_values(["case", "kernel"], key=lambda c: c if c.name == "kernel" else c.map(order))
    return out[["case", "head_dim", "causal", "kernel", "config", "tflops", "ratio"]].reset_index(drop=True)


def kernel_ratios(record: pd.DataFrame) -> pd.DataFrame:
    """A record of `_round_medians`' shape (`v10_record`, `v11_record`, ...) as a table: one row per
    case, one column per kernel, the ratio to FA3 FP8 rounded to two decimals."""
    return record.pivot_table(index="case", columns="kernel", values="ratio", sort=False, observed=True).round(2)


def v10_record(results_dir: str | Path) -> pd.DataFrame:
    """v10 against v9 on the grid, from one run (`bench_v10_final.json`, medians over its rounds):
    the Triton kernel's default of each version, the Gluon kernel (head dim 256) and vLLM's FP8
    varlen path. One row per (case, kernel): head_dim, causal, config, tflops, ratio to fa3-fwd FP8."""
    return _round_medians(Path(results_dir) / "bench_v10_final.json", {
        "v9 default": "v9 (Triton)", "default": "v10 (Triton)", "ws": "Gluon (ws)",
        "vLLM FA3 FP8 varlen": "vLLM FP8 varlen"})


def v11_record(results_dir: str | Path) -> pd.DataFrame:
    """v11's Gluon kernel against v10's, from one run (`bench_v11_ws1.json`, medians over three
    rounds): v10's Gluon kernel, v11's with P cast next to its MMA (plain V^T), the same with V^T
    from `key_ordered_vt`, and the Triton default. At head dim 256 v11 is shown with its new 64-key
    default; that run also timed the old 128-key tile, which spills in v11 (docs/kernel-notes.md)."""
    names = {"v10 ws": "v10 Gluon", "ws:ws-n128s3": "v11 Gluon, P cast at its MMA",
             "ws:ws-n128s4": "v11 Gluon, P cast at its MMA", "ws:ws-n128s3-kv": "v11 Gluon, + key-ordered V",
             "ws:ws-n128s4-kv": "v11 Gluon, + key-ordered V", "ws:ws-n64s4-kv": "v11 Gluon, + key-ordered V",
             "default": "Triton default"}
    return _round_medians(Path(results_dir) / "bench_v11_ws1.json", names)


def consumer_registers(head_dim: int, block_n: int, consumers: int = 2) -> dict[str, int]:
    """32-bit registers one consumer thread of the Gluon kernel needs for its tiles (64 query rows
    per warpgroup of 128 threads): O's accumulator, S's, and P carried to the next iteration's PV
    MMA as float32, as e4m3 one byte per register (how a loop-carried e4m3 tensor is held, v11) or
    packed four per word (`pack_p`, v12); `budget` is what `WsConfig` gives each consumer thread.
    Counts of values held, not of what the compiler allocates (temporaries come on top)."""
    check_count("head_dim", head_dim, 1)
    check_count("block_n", block_n, 1)
    o, s = 64 * head_dim // 128, 64 * block_n // 128
    return dict(head_dim=head_dim, block_n=block_n, consumers=consumers, o=o, s=s, p_float32=s,
                p_e4m3_bytes=s, p_packed=s // 4, budget=WsConfig(consumers=consumers).consumer_regs)


def register_carry_table(tiles: Iterable[tuple[int, int, int]]) -> pd.DataFrame:
    """`consumer_registers` for each (head_dim, block_n, consumers) in `tiles`, one row each, with its
    columns and two sums: "O + S + P float32" (P carried in float32, v11) and "O + S + P packed" (four
    e4m3 per word, v12), to hold against `budget`."""
    table = pd.DataFrame([consumer_registers(d, n, c) for d, n, c in tiles])
    if table.empty:
        raise ValueError("tiles: expected at least one (head_dim, block_n, consumers)")
    table["O + S + P float32"] = table["o"] + table["s"] + table["p_float32"]
    table["O + S + P packed"] = table["o"] + table["s"] + table["p_packed"]
    return table


def v12_record(results_dir: str | Path) -> pd.DataFrame:
    """v12's packed P against v11's, from one run (`bench_v12_ws1.json`, medians over two rounds;
    head dim 256, and 128 at 4k tokens), all with V^T from `key_ordered_vt`: P crossing the loop in
    float32 (v11's default tiles), P packed with v11's byte-by-byte unpack, P packed with v12's
    words as the A operand, and the Triton default."""
    names = {"ws:ws-n64s4-kv": "P in float32 (v11 default)", "ws:ws-n128s4-kv": "P in float32 (v11 default)",
             "ws:ws-n128s3-kv": "P in float32 (v11 default)",
             "v11 ws:ws-n128s3-pw-kv": "P packed, v11's unpack", "v11 ws:ws-n128s4-pw-kv": "P packed, v11's unpack",
             "ws:ws-n128s3-pw-kv": "P packed, words as the A operand (v12)",
             "ws:ws-n128s4-pw-kv": "P packed, words as the A operand (v12)",
             "default": "Triton default"}
    return _round_medians(Path(results_dir) / "bench_v12_ws1.json", names)


def v12_consumers_record(results_dir: str | Path) -> pd.DataFrame:
    """Three consumer warpgroups (FA3's 192-row tile) against two at head dim 64, from one run
    (`bench_v12_c3.json`, medians over two rounds), both with packed P and key-ordered V^T, and
    the Triton default."""
    names = {"ws:ws-n128s3-pw-kv": "Gluon, 2 consumers (128 rows)", "ws:ws-n128s4-pw-kv": "Gluon, 2 consumers (128 rows)",
             "ws:ws-n128s3-pw-c3-kv": "Gluon, 3 consumers (192 rows, v12)", "default": "Triton default"}
    out = _round_medians(Path(results_dir) / "bench_v12_c3.json", names)
    return out[out["head_dim"] == 64].reset_index(drop=True)


def v19_persistent_record(results_dir: str | Path, run: int = 2) -> pd.DataFrame:
    """Persistent programs against one program per tile, the Gluon kernel's v12 tiles with key-ordered
    V^T in both, from one run (`bench_v19_ps<run>.json`, medians over three rounds). Run 1 gave each
    persistent program tiles p, p + grid, ... (the committed order); run 2 alternated that order
    wave by wave (not kept) and also timed commit c3b2016's kernel, one program per tile."""
    labels = ("ws-n128s3-pw-c3", "ws-n128s4-pw", "ws-n128s3-pw")  # the v12 tiles at head dim 64, 128 and 256
    names = {f"ws:{label}-kv": "one program per tile" for label in labels}
    names |= {f"ws:{label}-ps-kv": "persistent, one program per SM" + " (alternating order)" * (run == 2)
              for label in labels}
    names |= {f"v12 ws:{label}-kv": "v12's kernel, one program per tile" for label in labels}
    names["default"] = "Triton default"
    return _round_medians(Path(results_dir) / f"bench_v19_ps{run}.json", names)


def kernel_gain(record: pd.DataFrame, kernel: str, over: str) -> pd.Series:
    """Per case of a `_round_medians`-shaped record (`v19_persistent_record`, `v20_dynamic_record`, ...),
    kernel's TFLOP/s over `over`'s, minus one (0.02: 2 % faster), in the record's case order; only the
    cases where both were timed. Named "<kernel> vs <over>"."""
    tflops = record.pivot_table(index="case", columns="kernel", values="tflops", sort=False, observed=True)
    missing = [k for k in (kernel, over) if k not in tflops.columns]
    if missing:
        raise ValueError(f"no kernel {missing} in this record; expected one of {list(tflops.columns)}")
    return (tflops[kernel] / tflops[over] - 1).dropna().rename(f"{kernel} vs {over}")


def persistent_schedule(batch: int, seqlen_q: int, heads: int, block_m: int, programs: int = 132) -> dict[str, int]:
    """How `programs` persistent programs share the tiles of one launch (one tile: `block_m` query rows
    of one head of one sequence). tiles = ceil(seqlen_q / block_m) x batch x heads; with a fixed list
    (program p takes tiles p, p + programs, ...) `full_waves` rounds give every program a tile, the
    `last_wave` tiles left over go to that many programs, and the busiest program takes `busiest`.
    With the tile counter every program starts with tile p and asks the counter once per tile it takes
    and once more to find none: `counter_adds` = (tiles - programs) + programs = tiles."""
    sizes = (batch, seqlen_q, heads, block_m, programs)
    if any(isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1 for n in sizes):
        raise ValueError(f"expected positive sizes (ints >= 1), got batch={batch!r}, seqlen_q={seqlen_q!r}, "
                         f"heads={heads!r}, block_m={block_m!r}, programs={programs!r}")
    tiles = math.ceil(seqlen_q / block_m) * batch * heads
    programs = min(programs, tiles)  # a launch never starts more programs than tiles
    return dict(tiles=tiles, programs=programs, full_waves=tiles // programs, last_wave=tiles % programs,
                busiest=math.ceil(tiles / programs), counter_adds=tiles)


def v20_dynamic_record(results_dir: str | Path) -> pd.DataFrame:
    """Three ways to hand tiles to the Gluon kernel's programs, v12's tiles with key-ordered V^T in
    all, and commit 3f90e40's kernel (v19) one program per tile, from two runs of three rounds each
    (medians): head dim 64 from `bench_v20_dy1.json`, 128 and 256 from `bench_v20_dy2.json`. One
    program per tile was timed causal only (non-causal it was v19's default no longer)."""
    labels = ("ws-n128s3-pw-c3", "ws-n128s4-pw", "ws-n128s3-pw")  # the v12 tiles at head dim 64, 128 and 256
    names = {f"ws:{label}-kv": "one program per tile" for label in labels}
    names |= {f"ws:{label}-ps-kv": "persistent, fixed list (v19)" for label in labels}
    names |= {f"ws:{label}-ps-dy-kv": "persistent, tile counter (v20)" for label in labels}
    names |= {f"v19 ws:{label}-kv": "v19's kernel, one program per tile" for label in labels}
    names["default"] = "Triton default"
    first = _round_medians(Path(results_dir) / "bench_v20_dy1.json", names)
    second = _round_medians(Path(results_dir) / "bench_v20_dy2.json", names)
    return pd.concat([first[first["head_dim"] == 64], second[second["head_dim"] > 64]], ignore_index=True)


def v20_gains(record: pd.DataFrame) -> pd.DataFrame:
    """`v20_dynamic_record`'s three comparisons per case, each `kernel_gain` (0.02: 2 % faster), NaN
    where not timed: "counter vs list" (the tile counter against v19's fixed lists, every case), "no
    loop vs v19" (one program per tile without the tile loop against v19's kernel, causal cases) and
    "counter vs one per tile" (the counter against one program per tile, causal cases)."""
    counter, fixed = "persistent, tile counter (v20)", "persistent, fixed list (v19)"
    per_tile, v19_per_tile = "one program per tile", "v19's kernel, one program per tile"
    cases = pd.Index(record["case"].drop_duplicates(), name="case")
    return pd.DataFrame({"counter vs list": kernel_gain(record, counter, fixed),
                         "no loop vs v19": kernel_gain(record, per_tile, v19_per_tile),
                         "counter vs one per tile": kernel_gain(record, counter, per_tile)}).reindex(cases)


def v21_causal_grids(results_dir: str | Path) -> pd.DataFrame:
    """The Gluon kernel's TFLOP/s over FA3 FP8's, per causal case, in v20's two grids (one program
    per tile, `bench_v20_grid*.json`) and v21's two (the tile counter, `bench_v21_grid*.json`):
    one column per schedule, the mean of its two grids."""
    def ratios(name: str) -> pd.Series:
        gluon = _round_medians(Path(results_dir) / f"{name}.json", {"fp8lab ws": "Gluon"})
        return gluon[gluon["causal"]].set_index("case")["ratio"]

    return pd.DataFrame({
        "one program per tile": (ratios("bench_v20_grid") + ratios("bench_v20_grid_run2")) / 2,
        "counter": (ratios("bench_v21_grid") + ratios("bench_v21_grid_run2")) / 2,
    })


def causal_schedule_table(grids: pd.DataFrame) -> pd.DataFrame:
    """`v21_causal_grids` with its difference, "counter - one per tile" (in units of FA3 FP8's speed),
    and a last row "mean" over the cases."""
    if list(grids.columns) != ["one program per tile", "counter"]:
        raise ValueError(f"expected v21_causal_grids' columns, got {list(grids.columns)}")
    table = grids.assign(**{"counter - one per tile": grids["counter"] - grids["one program per tile"]})
    return pd.concat([table, table.mean().to_frame("mean").T])


def v23_after_compile(results_dir: str | Path, case: str = "2x8192x32x256") -> pd.DataFrame:
    """The Gluon kernel against FA3 FP8 on `case` in every recorded grid, and what ran before it.

    One row per grid (`bench_v*_grid*.json` with a Gluon row for `case`): grid, method, before_s,
    timed (how it was timed: "after a compile", "card busy before", or the rounds' method), gluon
    and fa3 (TFLOP/s) and ratio. The single-median grids (v10-v21) time each provider once,
    right after the one before it; before_s is the seconds the previous case's two fp8lab timings
    took, compiling included (about 0.2 s when nothing compiled, so the card was busy; seconds
    when a kernel compiled and the card sat idle). v23's grids time every case in five interleaved
    rounds (`bench.interleaved_times`), three of them after 1.5 s of load and one with none:
    before_s is NaN, TFLOP/s are medians over the rounds.
    """
    paths = sorted(Path(results_dir).glob("bench_v*_grid*.json"), key=lambda p: (int(p.name.split("_")[1][1:]), p.name))
    if not paths:
        raise FileNotFoundError(f"no bench_v*_grid*.json under {results_dir}")
    rows = []
    for path in paths:
        data = load_results(path)
        timed = [r for r in data["rows"] if "tflops" in r]
        cases = list(dict.fromkeys(r["case"] for r in timed))
        mine = {r["provider"]: r for r in timed if r["case"] == case}
        if "fp8lab ws" not in mine or "fa3-fwd FP8" not in mine:
            continue
        rounds = data["meta"].get("rounds")
        if rounds:
            settle = data["meta"]["settle_s"]
            before = float("nan")
            method = f"{rounds} rounds after {settle} s of load" if settle else f"{rounds} rounds, no load first"
        elif all("compile_and_time_s" in r for r in mine.values()) and cases.index(case) > 0:
            prev = cases[cases.index(case) - 1]
            before = sum(r["compile_and_time_s"] for r in timed if r["case"] == prev
                         and r["provider"] in ("fp8lab", "fp8lab ws"))
            method = "one median each"
        else:
            continue
        gluon, fa3 = mine["fp8lab ws"]["tflops"], mine["fa3-fwd FP8"]["tflops"]
        how = method if rounds else "after a compile" if before > 1.0 else "card busy before"
        rows.append(dict(grid=path.stem.removeprefix("bench_"), method=method, before_s=before, timed=how,
                         gluon=gluon, fa3=fa3, ratio=gluon / fa3))
    if not rows:
        raise ValueError(f"case: expected a case that a grid under {results_dir} timed with the Gluon kernel and "
                         f"fa3-fwd FP8, e.g. '2x8192x32x256', got {case!r}")
    return pd.DataFrame(rows)


def v23_swing(results_dir: str | Path, grid: str = "v21_grid", case: str = "2x8192x32x256",
              clock_log: str = "run17/call5/clocks.csv", before_s: float = 4.5, after_s: float = 2.5
              ) -> tuple[pd.DataFrame, dict[str, tuple[pd.Timestamp, pd.Timestamp]]]:
    """The card's clock and power around the Gluon kernel's timing of `case` in a one-median grid:
    the `read_clock_log` samples of `clock_log` from `before_s` seconds before the second in which
    that timing ended (its `done_at`) to `after_s` after it, and that second as a span for
    `fp8lab.plots.perf.plot_clock_trace`. The defaults are v21's first grid, which ran 0.847."""
    rows = load_results(Path(results_dir) / f"bench_{grid}.json")["rows"]
    found = [r for r in rows if r.get("case") == case and r.get("provider") == "fp8lab ws"]
    if len(found) != 1:
        timed = list(dict.fromkeys(r["case"] for r in rows if r.get("provider") == "fp8lab ws"))
        raise ValueError(f"case: expected one Gluon timing of {case!r} in bench_{grid}.json, got {len(found)}; "
                         f"its cases: {timed}")
    (row,) = found
    done = pd.Timestamp(pd.to_datetime(row["done_at"], format="%Y/%m/%d %H:%M:%S"))
    log = read_clock_log(Path(results_dir) / clock_log)
    start, end = done - pd.Timedelta(seconds=before_s), done + pd.Timedelta(seconds=after_s)
    window = log[(log["time"] >= start) & (log["time"] <= end)].reset_index(drop=True)
    return window, {"the second in which Gluon's timing ended": (done, done + pd.Timedelta(seconds=1))}


# Nsight Compute's raw metrics behind v22_quant_profile's first rows: (label, metric, unit it is recorded in, factor)
_PROFILE_METRICS = (
    ("kernel time under ncu (us)", "gpu__time_duration.sum", "us", 1.0),
    ("DRAM read (MB)", "dram__bytes_read.sum", "Mbyte", 1.0),
    ("DRAM written while it ran (MB)", "dram__bytes_write.sum", "Mbyte", 1.0),
    ("DRAM busy cycles (thousands per channel)", "dram__cycles_active.avg", "cycle", 1e-3),
    ("DRAM bytes per second (TB/s)", "dram__bytes.sum.per_second", "Tbyte/s", 1.0),
    ("L2 read hit rate (%)", "lts__t_sector_op_read_hit_rate.pct", "%", 1.0),
)
PROFILED_QUANT_SHAPES = ("token-1x16384", "token-2x8192", "token-4x4096", "head-1x16384")


def v22_quant_profile(results_dir: str | Path) -> pd.DataFrame:
    """Nsight Compute on the warp-specialized per-head quantization kernel (v22, `run18/call3`):
    128 MiB of bf16 x, 16k tokens x 32 heads x 128, as 1, 2 or 4 token-major sequences and as 32
    contiguous slices (head-major); one launch each. Rows: what was measured; columns:
    PROFILED_QUANT_SHAPES. The last rows come from the SASS counts (1 and 4 sequences): the
    waiter's table reads per part (two 16-byte loads per lane each), and try-waits per wait on
    each mbarrier array (a try-wait is retried until the phase flips, so the count grows with
    the wait). The arrays are told apart by their arrivals: the loader's TMA expects bytes on
    `full` (one per part; the amax and waiter warps wait on it), the waiter arrives once per part
    on `ready` (the cast warps wait), each cast warp once per part on `empty` (the loader waits)."""
    run = Path(results_dir) / "run18" / "call3"
    table = {}
    for shape in PROFILED_QUANT_SHAPES:
        raw = read_ncu_raw(run / f"raw_{shape}.csv")
        col = {}
        for label, metric, unit, factor in _PROFILE_METRICS:
            if raw.loc[metric, "unit"] != unit:
                raise ValueError(f"{shape}: {metric} recorded in {raw.loc[metric, 'unit']!r}, expected {unit!r}")
            col[label] = raw.loc[metric, "value"] * factor
        sass_path = run / f"source_{shape}.csv"
        if sass_path.exists():
            sass = read_ncu_sass(sass_path)
            bars = mbarrier_waits(sass)
            full = bars[bars["arrive_expect"] > 0].iloc[0]
            parts = full["arrive_expect"]
            ready = bars[bars["arrive"] == parts].iloc[0]
            empty = bars[bars["arrive"] > parts].iloc[0]
            table_loads = sass.loc[sass["sass"].str.contains(r"LDG\.E\.128\.STRONG\.SYS"), "executed"].sum()
            col["table reads per part"] = table_loads / 2 / parts
            col["try-waits per wait for a part to land (amax, waiter)"] = full["try_waits"] / (2 * parts)
            col["try-waits per wait for a hand-over (cast warps)"] = ready["try_waits"] / empty["arrive"]
            col["try-waits per wait for a free buffer (loader)"] = empty["try_waits"] / parts
        table[shape] = col
    return pd.DataFrame(table).round(2)


def quant_split_table(shapes: pd.DataFrame, copy_tbps: float | None = None) -> pd.DataFrame:
    """One `quant_shapes` record (`bench.records_frame(..., "quant_shapes")`, one version): per
    kernel (rows, in the record's order) and batch split of the same 128 MiB (columns), the lowest
    and highest fraction of copy over the repeats; of the copy timed in the same run, or of
    `copy_tbps` (e.g. the issue's 4.3 TB/s)."""
    if copy_tbps is not None and (not isinstance(copy_tbps, numbers.Real) or not 0 < copy_tbps < math.inf):
        raise ValueError(f"copy_tbps: expected TB/s, a finite number > 0, or None, got {copy_tbps!r}")
    check_one_version(shapes, "shapes")
    frac = shapes["frac_copy_graph"]
    if copy_tbps is not None:
        frac = frac * shapes["copy_tbps_graph"] / copy_tbps
    table = shapes.assign(frac=frac).groupby(["kernel", "batch"], sort=False)["frac"].agg(["min", "max"]).round(3)
    return table.unstack("batch").swaplevel(axis=1).sort_index(axis=1, level=0, sort_remaining=False)


def quant_sizes(path: str | Path) -> pd.DataFrame:
    """A size sweep of the quantization kernels (`probe_quant_delayed.py --sizes`, e.g.
    `bench_v26_quant_sizes.json`): one row per (round, size, kernel) timing, mib as int."""
    df = pd.DataFrame(load_results(path)["rows"]).dropna(subset=["kernel"])
    return df.assign(mib=df["mib"].astype(int))


def quant_size_table(sizes: pd.DataFrame) -> pd.DataFrame:
    """`quant_sizes` as a table: per kernel (rows, in the record's order) and MiB (columns), the
    lowest fraction of the same-size copy over the rounds."""
    return sizes.pivot_table(index="kernel", columns="mib", values="frac_copy_graph", aggfunc="min", sort=False)


def delayed_kernel_check(series: list[torch.Tensor], strategies: dict[str, Callable[[], ScaleStrategy]],
                         device: str | torch.device = "cpu") -> pd.DataFrame:
    """Run each series of tensors through `fp8lab.scaling.quantize` and through the one-pass kernel
    `quantize_delayed`, each with a fresh strategy from its factory (`DelayedAmax` sources).
    One row per (strategy, step): whether the descales and the e4m3 bits are the same."""
    for name, make in strategies.items():
        if not callable(make):  # each side needs its own fresh state: a factory, not one shared strategy
            raise TypeError(f"strategies[{name!r}]: expected a factory returning a fresh ScaleStrategy (e.g. "
                            f"lambda: ScaleStrategy(...)), got {type(make).__name__}")
    rows = []
    for name, make in strategies.items():
        reference, kernel = make(), make()
        for step, x in enumerate(series):
            y_ref, d_ref = quantize(x, reference)
            y, d = quantize_delayed(x.to(device), kernel)
            rows.append(dict(strategy=name, step=step, same_descale=bool(torch.equal(d.cpu(), d_ref)),
                             same_bits=bool(torch.equal(y.view(torch.uint8).cpu(), y_ref.view(torch.uint8)))))
    return pd.DataFrame(rows)


def v_layout_costs(results_dir: str | Path, version: str = "v2") -> pd.DataFrame:
    """The V layout lesson in numbers (d=128, 2 x 8192 x 32 heads, non-causal): the kernel with
    natural V, with pre-transposed V, and the one-off cost of pre-transposing V."""
    sweep = records_frame(results_dir, "sweep")
    if version not in set(sweep["version"]):
        raise ValueError(f"version: expected one of {sorted(set(sweep['version']), key=version_key)} "
                         f"(a bench_<version>_sweep.json), got {version!r}")
    sweep = sweep[(sweep["version"] == version) & (sweep["head_dim"] == 128)]
    run = sweep[(sweep["causal"] == False) & sweep["ms"].notna()]  # noqa: E712 - pandas mask
    natural = run[run["layout"] == "natural"].sort_values("ms").iloc[0]
    transposed = run[(run["layout"] == "transposed") & (run["config"] == natural["config"])]
    pre = sweep[sweep["config"] == "pretranspose_v"].iloc[0]
    rows = [dict(what="attention, natural V (transposed per tile in the kernel)", ms=natural["ms"]),
            dict(what="attention, pre-transposed V", ms=transposed["ms"].iloc[0] if len(transposed) else math.nan),
            dict(what="pretranspose_v(V) once", ms=pre["ms"])]
    return pd.DataFrame(rows).assign(config=natural["config"])


def v24_v_layout(results_dir: str | Path) -> pd.DataFrame:
    """What storing V keys-contiguous costs (v24, `bench_v24_v_layout.json`): per head dim (V of 16k
    tokens x 32 kv heads, e4m3) and operation, the median microseconds over three repeats (`do_bench`,
    and CUDA-graph replays) and TB/s (reads plus writes), and whether the bytes equal torch's.
    `pretranspose_v` and `key_ordered_vt` run `transpose_keys` (Triton); "torch ..." are the copies
    they replaced."""
    rows = [r for r in load_results(Path(results_dir) / "bench_v24_v_layout.json")["rows"] if r["part"] == "v layout"]
    df = pd.DataFrame(rows)
    out = df.pivot_table(index=["head_dim", "mib", "op"], columns="timer", values="ms", aggfunc="median", sort=False) * 1e3
    out.columns = [f"us ({c})" for c in out.columns]
    out["TB/s (graph)"] = 2 * out.index.get_level_values("mib") * 2**20 / (out["us (graph)"] * 1e-6) / 1e12
    out["same bytes"] = df.groupby(["head_dim", "mib", "op"], sort=False)["same_bytes"].all()
    return out.reset_index().rename(columns={"mib": "V MiB"})


def v24_api_grid(results_dir: str | Path) -> pd.DataFrame:
    """The grid through `fp8lab.attention` (v24, `bench_v24_api.json`: medians of five interleaved
    rounds): per case, TFLOP/s of backend "triton" (the Gluon kernel on Hopper, V stored by
    `key_ordered_vt` in every call), "triton:triton" (the Triton kernel, V by `pretranspose_v` in
    every call) and "fa3:fa3-fwd", all with V in FA3's layout and the API's checks; the two kernels
    called directly on prepared V and fa3-fwd called directly; and the ratios of the API's fastest
    path to fa3-fwd through the API and called directly."""
    rows = [r for r in load_results(Path(results_dir) / "bench_v24_api.json")["rows"] if "tflops" in r]
    df = pd.DataFrame(rows).pivot_table(index="case", columns="provider", values="tflops", sort=False)
    gluon = next(c for c in df.columns if c.startswith("api triton ("))
    out = pd.DataFrame({
        "API triton (Gluon)": df[gluon], "API triton:triton": df["api triton:triton"],
        "API fa3:fa3-fwd": df["api fa3:fa3-fwd"], "Gluon direct": df["fp8lab ws"], "Triton direct": df["fp8lab"],
        "fa3-fwd direct": df["fa3-fwd FP8"]})
    out["API Gluon / API FA3"] = out["API triton (Gluon)"] / out["API fa3:fa3-fwd"]
    out["API Gluon / FA3 direct"] = out["API triton (Gluon)"] / out["fa3-fwd direct"]
    out["Gluon direct / FA3 direct"] = out["Gluon direct"] / out["fa3-fwd direct"]
    return out


def transpose_v_forms(results_dir: str | Path) -> pd.DataFrame:
    """V transposed inside the Gluon kernel (v30, v31, `scripts/probe_transpose_v.py`; medians of three
    interleaved rounds at 2x8192x32xd). Per form of the transposer and case: "shifts" (v30's first
    form, bytes moved with shifts and masks, `bench_v30_transpose_v_shifts.json`), "PRMT" (v30's kept
    one, eight byte permutes per 4 x 4 bytes, `bench_v30_transpose_v.json`, at head dim 256 timed in
    v31, `bench_v31_transpose_v_prmt_d256.json`) and "LDSM.T" (v31: 16-bit pairs read with
    `ldmatrix.trans`, two PRMTs per pair of words, stored with `stmatrix`, in V^T's own stages,
    `bench_v31_transpose_v.json`). TFLOP/s of: the key-ordered
    kernel on V^T made before the call ("V^T ready") and with `key_ordered_vt` inside the timed call
    ("+ copy", what `fp8lab.attention` runs); the fastest `transpose_v` config; the same tiles with a
    transposer that does no work ("no transpose": wrong results, what the rest costs); fa3-fwd FP8.
    Ratios: in-kernel transpose / V^T ready and / + copy."""
    frames = []
    for form, names in (("shifts", ["bench_v30_transpose_v_shifts.json"]),
                        ("PRMT", ["bench_v30_transpose_v.json", "bench_v31_transpose_v_prmt_d256.json"]),
                        ("LDSM.T", ["bench_v31_transpose_v.json"])):
        rows = [r for name in names for r in load_results(Path(results_dir) / name)["rows"] if "tflops" in r]
        df = pd.DataFrame(rows).pivot_table(index="case", columns="provider", values="tflops", aggfunc="median",
                                            sort=False)
        tv = [c for c in df.columns if c.startswith("fp8lab ws ws-")]
        none = [c for c in df.columns if c.startswith("no transpose")]
        out = pd.DataFrame({"V^T ready": df["fp8lab ws"], "+ copy": df["fp8lab ws + copy"],
                            "transpose_v": df[tv].max(axis=1),
                            "its config": df[tv].idxmax(axis=1).str.replace("fp8lab ws ws-", "ws-", regex=False),
                            "no transpose": df[none].max(axis=1) if none else float("nan"),
                            "FA3 FP8": df["fa3-fwd FP8"]})
        out["transpose_v / V^T ready"] = out["transpose_v"] / out["V^T ready"]
        out["transpose_v / + copy"] = out["transpose_v"] / out["+ copy"]
        frames.append(out.assign(form=form).set_index("form", append=True))
    return pd.concat(frames).reorder_levels(["form", "case"])


def transpose_v_ratios(forms: pd.DataFrame) -> pd.DataFrame:
    """`transpose_v_forms` (or any frame with its columns "V^T ready", "+ copy", "transpose_v" and "no
    transpose") as fractions of the V^T-ready kernel of the same run, per row: "transpose_v / V^T ready"
    (the in-kernel transpose), "no transpose / V^T ready" (a transposer that does no work; NaN where not
    timed) and "+ copy / V^T ready" (`key_ordered_vt` inside the timed call). Same index as `forms`."""
    ready = forms["V^T ready"]
    return pd.DataFrame({"transpose_v / V^T ready": forms["transpose_v"] / ready,
                         "no transpose / V^T ready": forms["no transpose"] / ready,
                         "+ copy / V^T ready": forms["+ copy"] / ready})


def transpose_v_summary(forms: pd.DataFrame, form: str = "LDSM.T") -> pd.DataFrame:
    """One form of `transpose_v_forms` by head dim: the lowest and highest (over causal and not) of the
    in-kernel transpose, the copy (`key_ordered_vt` inside the timed call) and the transposer that does no
    work, each as a fraction of the V^T-ready kernel of its own run. Rows: head dim; columns: (ratio,
    "lowest" / "highest"); NaN where the run timed no such tiles ("no transpose" at head dim 256)."""
    forms_timed = list(dict.fromkeys(forms.index.get_level_values("form")))
    if form not in forms_timed:
        raise ValueError(f"no form {form!r}; expected one of {forms_timed}")
    ratios = transpose_v_ratios(forms).xs(form, level="form")
    head_dim = ratios.index.map(lambda case: int(case.split()[0].split("x")[-1])).rename("head_dim")
    out = ratios.groupby(head_dim).agg(["min", "max"])
    return out.rename(columns={"min": "lowest", "max": "highest"}, level=1)


def describe_transpose_v(summary: pd.DataFrame) -> list[str]:
    """`transpose_v_summary` in words, one line per head dim: the in-kernel transpose, the copy plus the
    kernel and (where timed) the transposer that does no work, each as lowest-highest fraction of the
    V^T-ready kernel's speed (one number where both round to the same)."""
    def span(row: pd.Series, ratio: str) -> str:
        low, high = f"{row[(ratio, 'lowest')]:.2f}", f"{row[(ratio, 'highest')]:.2f}"
        return f"{low}x" if low == high else f"{low}-{high}x"

    lines = []
    for d, row in summary.iterrows():
        line = (f"d={d}: in-kernel transpose {span(row, 'transpose_v / V^T ready')}, "
                f"copy + kernel {span(row, '+ copy / V^T ready')}")
        if not pd.isna(row[("no transpose / V^T ready", "lowest")]):
            line += f", no transpose (in place) {span(row, 'no transpose / V^T ready')}"
        lines.append(line)
    return lines


def pv_accumulation(results_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """v27's long-context run (`bench_v27_long_context.json`, `scripts/probe_long_context.py`): rel L2
    against exact attention per kernel or emulation (rows) and number of keys (columns), and the
    Triton kernel's TFLOP/s with and without `pv_flush` (median of three rounds per case)."""
    rows = load_results(Path(results_dir) / "bench_v27_long_context.json")["rows"]
    err = pd.DataFrame([r for r in rows if "seqlen_k" in r and "rel_l2" in r])
    errors = err.pivot_table(index="who", columns="seqlen_k", values="rel_l2", sort=False)
    timed = pd.DataFrame([r for r in rows if "tflops" in r])
    speed = timed.pivot_table(index="case", columns="config", values="tflops", aggfunc="median", sort=False)
    return errors, speed


def pv_accumulation_summary(errors: pd.DataFrame,
                            one_level: tuple[str, ...] = ("triton kernel", "gluon kernel", "fa3-fwd"),
                            flushed: tuple[str, ...] = ("triton kernel, pv_flush",)) -> dict[str, float]:
    """`pv_accumulation`'s errors in four numbers: the worst of the `one_level` rows (O accumulated in
    the FP8 MMA) at the fewest keys ("one level, shortest") and at the most ("one level, longest"), and
    the lowest and highest of the `flushed` rows at any length ("pv_flush, lowest", "pv_flush, highest");
    with "shortest" and "longest", the numbers of keys."""
    missing = [who for who in one_level + flushed if who not in errors.index]
    if missing:
        raise ValueError(f"no rows {missing} in these errors; expected some of {list(errors.index)}")
    one, flush = errors.loc[list(one_level)], errors.loc[list(flushed)]
    return {"shortest": int(errors.columns[0]), "longest": int(errors.columns[-1]),
            "one level, shortest": float(one.iloc[:, 0].max()), "one level, longest": float(one.iloc[:, -1].max()),
            "pv_flush, lowest": float(flush.min().min()), "pv_flush, highest": float(flush.max().max())}


def pv_flush(results_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """v28's `pv_flush` runs (`scripts/probe_pv_flush.py`, medians of three interleaved rounds):

    errors (`bench_v28_long_context.json`, d = 128, and `_d256.json`): rel L2 against exact attention
    on v27's long-context inputs, per (head dim, kernel tile, provider ("vllm-so": vLLM's FA3
    library) or emulation model) and number of keys (columns). tiles: TFLOP/s at 2x8192x32xd per
    case (rows) and call (columns: both kernels' defaults, every `pv_flush` tile tried, the
    providers); head dims 64 and 128 from `bench_v28_pv_flush.json`, 256 from the later run with
    the Gluon kernel's `pv_halves` (`bench_v28_pv_halves.json`). grid: the issue's grid with both
    kernels' `pv_flush` defaults (`bench_v28_pv_flush_grid.json`; head dim 256 from the later run
    with `pv_halves` the default, `_grid_d256.json`), and the faster of the two flushing kernels
    against fa3-fwd FP8 (no flush), vLLM's FP8 varlen path (flushes every block) and FA3 bf16; then each
    kernel's flushing default over its plain default ("Triton pv_flush / Triton", "Gluon pv_flush / Gluon":
    the speed the flush keeps)."""
    rdir = Path(results_dir)

    def rows(name: str, keep=lambda r: True) -> list[dict]:
        return [r for r in load_results(rdir / name)["rows"] if keep(r)]

    err = pd.DataFrame([dict(r, head_dim=d) for d, name in ((128, "bench_v28_long_context.json"),
                                                            (256, "bench_v28_long_context_d256.json"))
                        for r in rows(name, lambda r: "rel_l2" in r)])
    errors = err.pivot_table(index=["head_dim", "who"], columns="seqlen_k", values="rel_l2", sort=False)
    timed = pd.DataFrame(rows("bench_v28_pv_flush.json", lambda r: "tflops" in r and r["head_dim"] != 256)
                         + rows("bench_v28_pv_halves.json", lambda r: "tflops" in r))
    tiles = timed.pivot_table(index="case", columns="provider", values="tflops", aggfunc="median", sort=False)
    g = pd.DataFrame(rows("bench_v28_pv_flush_grid.json", lambda r: "tflops" in r and r["head_dim"] != 256)
                     + rows("bench_v28_pv_flush_grid_d256.json", lambda r: "tflops" in r))
    g = g.pivot_table(index="case", columns="provider", values="tflops", aggfunc="median", sort=False)
    names = {"fp8lab": "Triton", "fp8lab pf": "Triton pv_flush", "fp8lab ws": "Gluon", "fp8lab ws pf": "Gluon pv_flush",
             "fa3-fwd FP8": "FA3 FP8", "vLLM FA3 FP8 varlen": "vLLM FP8 varlen", "fa3-fwd bf16": "FA3 bf16"}
    grid = g[list(names)].rename(columns=names)
    best = grid[["Triton pv_flush", "Gluon pv_flush"]].max(axis=1)
    for other in ("FA3 FP8", "vLLM FP8 varlen", "FA3 bf16"):
        grid[f"pv_flush / {other}"] = best / grid[other]
    for kernel in ("Triton", "Gluon"):
        grid[f"{kernel} pv_flush / {kernel}"] = grid[f"{kernel} pv_flush"] / grid[kernel]
    return errors, tiles, grid


def pv_flush_kept(tiles: pd.DataFrame, case: str, config: AttentionConfig) -> float:
    """From `pv_flush`'s tiles: the Triton kernel's TFLOP/s in `config` (a `pv_flush` tile) over its
    default's ("fp8lab") on `case`, the fraction of the speed the tile keeps."""
    column = f"fp8lab {config.label()}"
    if column not in tiles.columns or case not in tiles.index:
        raise ValueError(f"no timing of {column!r} on {case!r}; timed: {list(tiles.columns)} on {list(tiles.index)}")
    return float(tiles.loc[case, column] / tiles.loc[case, "fp8lab"])


def long_context_table(results_dir: str | Path) -> pd.DataFrame:
    """`fp8lab.bench.long_context_headline`'s probe as a table: rel L2 against exact attention on V + 1
    inputs (d = 128), one row per provider ("fa3-fwd", "ours": the worse of our two kernels, "ours,
    pv_flush": the worst flushing tile, "vllm-so"), one column per number of keys."""
    return pd.DataFrame(long_context_headline(results_dir)["probe"]).T


def flush_registers(config: AttentionConfig, head_dim: int) -> dict[str, object]:
    """fp32 values one thread of the Triton kernel holds for S (block_m x block_n), O (block_m x
    head_dim) and, with `pv_flush`, the key block's P V tile beside O, for a config whose warpgroups
    each take whole query rows (block_m >= 64 per warpgroup of 4 warps). Counts of values held: the
    compiler's temporaries come on top, and a thread has 255 registers (`budget`)."""
    check_count("head_dim", head_dim, 1)
    groups = config.num_warps // 4
    if config.num_warps % 4 or config.block_m < 64 * groups:
        raise ValueError(f"config {config.label()}: expected warpgroups of whole query rows (num_warps a multiple "
                         f"of 4, block_m >= 64 per warpgroup), got block_m={config.block_m}, "
                         f"num_warps={config.num_warps}")
    rows = config.block_m // groups
    s, o = rows * config.block_n // 128, rows * head_dim // 128
    flush = o if config.pv_flush else 0
    return dict(config=config.label(), head_dim=head_dim, rows_per_warpgroup=rows, s=s, o=o, pv_tile=flush,
                total=s + o + flush, budget=255)


def flush_register_table(configs: Iterable[AttentionConfig], head_dim: int) -> pd.DataFrame:
    """`flush_registers` for each config at `head_dim`, one row each, indexed by the config's label;
    columns head_dim, rows_per_warpgroup, s, o, pv_tile, total, budget."""
    table = pd.DataFrame([flush_registers(c, head_dim) for c in configs])
    if table.empty:
        raise ValueError("configs: expected at least one AttentionConfig")
    return table.set_index("config")


def api_overhead(results_dir: str | Path, version: str = "v24") -> pd.DataFrame:
    """One call taken apart (`bench_{version}_api_overhead.json`, `scripts/probe_api_overhead.py`; v27
    adds the calls made by `prepare_attention`): per case and variant the median milliseconds of
    `do_bench` and of 20 calls between syncs, over two repeats, and the extra over the kernel called
    directly (the Gluon kernel's variants against "ws direct", fa3-fwd's against "fa3 direct")."""
    df = pd.DataFrame(load_results(Path(results_dir) / f"bench_{version}_api_overhead.json")["rows"])
    out = df.groupby(["case", "variant"], sort=False)[["do_bench_ms", "wall_ms_synced"]].median().reset_index()
    base = out["variant"].map(lambda v: "fa3 direct" if "fa3" in v else "ws direct")
    ref = out.set_index(["case", "variant"])["do_bench_ms"]
    out["extra ms"] = out["do_bench_ms"] - [ref[(c, b)] for c, b in zip(out["case"], base)]
    return out


@triton.jit
def _key_order_kernel(OUT, BLOCK_N: tl.constexpr):
    tl.store(OUT + tl.arange(0, BLOCK_N), key_order(BLOCK_N, True))


def key_order_values(block_n: int = 32, device: str | torch.device | None = None) -> torch.Tensor:
    """The kernel's own `key_order` (permute_keys=True) run for one block: (block_n,) int32 on the
    CPU, the key that score column c holds; equally the column where `key_ordered_vt` stores key c.
    device: where the kernel runs (None: the GPU if there is one, else the interpreter)."""
    if check_count("block_n", block_n, 16) & (block_n - 1):  # tl.arange takes powers of two only
        raise ValueError(f"block_n: expected a power of two >= 16 (a kernel key block), got {block_n!r}")
    if device is None:
        device = "cuda" if torch.cuda.is_available() and not triton_interpret() else "cpu"
    tau = torch.empty(block_n, dtype=torch.int32, device=device)
    _key_order_kernel[(1,)](tau, BLOCK_N=block_n)
    return tau.cpu()


def key_ordered_vt_landing(block: int = 32, device: str | torch.device = "cpu") -> torch.Tensor:
    """Where `key_ordered_vt` stores each key: (block,) int64, the V^T column of key c, found by
    running the copy on V = identity (V^T then is a permutation matrix). block: a multiple of 32;
    device: where V is made (a GPU runs `transpose_keys`, the CPU torch's copy)."""
    if check_count("block", block, 32) % 32:
        raise ValueError(f"block: expected a positive multiple of 32 keys, got {block}")
    eye = torch.eye(block).reshape(1, block, 1, block).to(torch.float8_e4m3fn).to(device)  # v[0, key, 0, j] = key == j
    moved = key_ordered_vt(eye).data[0, 0].float()  # (head_dim j, key column): a 1 where key j landed
    return moved.argmax(dim=1).cpu()


def transposer_keys(t: int, group: int) -> list[int]:
    """The keys a transposer thread with lane index t (0..3) of the Gluon kernel's `transpose_v` reads
    from group `group` of 16 keys (0: keys 0-15, 1: keys 16-31 of each 32): the four that
    `key_ordered_vt` stores at V^T positions 16 group + 4t .. 16 group + 4t + 3, so that a 4 x 4 byte
    transpose gives whole words of V^T. Sorted."""
    if t not in range(4) or group not in range(2):
        raise ValueError(f"expected t in 0..3 and group in 0..1, got t={t}, group={group}")
    landing = key_ordered_vt_landing(32)
    first = 16 * group + 4 * t
    return sorted(key for key in range(32) if first <= int(landing[key]) < first + 4)


def p_register_layout(device: str | torch.device = "cpu") -> pd.DataFrame:
    """FP8 step 5 in a table, for the four threads of a quad and one group of 32 keys.

    Hopper's wgmma gives thread t the accumulator columns {2t, 2t+1} + 8j (j = 0..3) of S, while
    the e4m3 A operand of the PV wgmma must hold keys {4t..4t+3} + 16i (i = 0, 1) in its
    registers. Columns: which keys t's accumulator holds with plain K and with `permute_keys` (the
    kernel's own `key_order`, run here), which keys its A registers need, and how many of those
    it must fetch from other threads in each case (the shuffles `permute_keys` removes).
    """
    tau = key_order_values(32, device).tolist()
    rows = []
    for t in range(4):
        cols = [8 * j + 2 * t + e for j in range(4) for e in (0, 1)]
        need = [16 * i + 4 * t + e for i in range(2) for e in range(4)]
        held = [tau[c] for c in cols]
        rows.append({"thread": t, "accumulator columns": cols, "A operand needs keys": need,
                     "keys held, plain K": cols, "keys held, permute_keys": held,
                     "fetched from other threads, plain": len(set(need) - set(cols)),
                     "fetched from other threads, permute_keys": len(set(need) - set(held))})
    return pd.DataFrame(rows).set_index("thread")


def fetched_counts(layout: pd.DataFrame) -> dict[str, int]:
    """`p_register_layout`'s shuffles summed over the quad: P values its four threads must fetch from
    other threads, {"plain": ..., "permute_keys": ...}."""
    return {"plain": int(layout["fetched from other threads, plain"].sum()),
            "permute_keys": int(layout["fetched from other threads, permute_keys"].sum())}


@triton.jit
def _cast_kernel(X, PLAIN8, ROUNDED8, PLAIN16, ROUNDED16, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(X + offs)
    tl.store(PLAIN8 + offs, x.to(tl.float8e4nv))
    tl.store(ROUNDED8 + offs, round_to_e4m3(x).to(tl.float8e4nv))
    tl.store(PLAIN16 + offs, x.to(tl.bfloat16))
    tl.store(ROUNDED16 + offs, round_to_bf16(x).to(tl.bfloat16))


def cast_demo(values: list[float], device: str | torch.device = "cpu") -> pd.DataFrame:
    """Triton's own fp32 -> e4m3 / bf16 casts against the pre-rounded ones and the reference.

    Under TRITON_INTERPRET=1 the plain casts go wrong (e4m3 when rounding carries into
    the exponent, bf16 always truncates); on a GPU every column agrees. |values| <= 448.
    """
    big = [x for x in values if abs(x) > 448]
    if big:  # beyond e4m3's range the kernel's casts and the saturating reference disagree everywhere
        raise ValueError(f"values: expected numbers with |x| <= 448 (e4m3fn's largest), got {big[0]!r}")
    n = triton.next_power_of_2(max(len(values), 1))
    x = torch.zeros(n, dtype=torch.float32)
    x[: len(values)] = torch.tensor(values, dtype=torch.float32)
    x = x.to(device)
    outs = [torch.empty(n, dtype=dt, device=device) for dt in (torch.float8_e4m3fn,) * 2 + (torch.bfloat16,) * 2]
    _cast_kernel[(1,)](x, *outs, N=n)
    k = len(values)
    return pd.DataFrame({
        "x": x[:k].cpu().numpy(),
        "triton e4m3 cast": outs[0][:k].float().cpu().numpy(),
        "round_to_e4m3, then cast": outs[1][:k].float().cpu().numpy(),
        "reference e4m3 (RNE)": cast_to_fp8(x[:k].cpu()).float().numpy(),
        "triton bf16 cast": outs[2][:k].float().cpu().numpy(),
        "round_to_bf16, then cast": outs[3][:k].float().cpu().numpy(),
        "reference bf16 (RNE)": x[:k].cpu().to(torch.bfloat16).float().numpy(),
    })

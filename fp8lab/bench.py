"""Benchmarks with context: FLOP and byte counts, median timings, recorded results.

Every number leaves this module with the GPU, driver, versions, date and
shapes it was measured with (`fp8lab.env.context()`), so a TFLOP/s figure never
travels alone. Timings are medians of repeated runs (`triton.testing.do_bench`,
which times with CUDA events and flushes the L2 between runs).
"""

from __future__ import annotations

import csv
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable

__all__ = [
    "AttentionCase",
    "attention_flops",
    "bench_grid",
    "load_results",
    "median_ms",
    "ratio_table",
    "tflops",
    "tbps",
    "write_results",
]


@dataclass(frozen=True)
class AttentionCase:
    """One benchmark shape in FA3's batched layout: (batch, seqlen, heads, head_dim)."""

    batch: int
    seqlen: int
    heads_q: int
    heads_kv: int
    head_dim: int
    causal: bool

    @property
    def tokens(self) -> int:
        return self.batch * self.seqlen

    def flops(self) -> float:
        return attention_flops(self.batch, self.seqlen, self.seqlen, self.heads_q, self.head_dim, self.causal)

    def label(self) -> str:
        hk = f"/{self.heads_kv}" if self.heads_kv != self.heads_q else ""
        return f"{self.batch}x{self.seqlen}x{self.heads_q}{hk}x{self.head_dim}{' causal' if self.causal else ''}"


def attention_flops(batch: int, seqlen_q: int, seqlen_k: int, heads_q: int, head_dim: int, causal: bool) -> float:
    """Forward FLOPs by FlashAttention's convention: 2 matmuls of 2*sq*sk*d each per head, half when causal."""
    flops = 4.0 * batch * seqlen_q * seqlen_k * heads_q * head_dim
    return flops / 2 if causal else flops


def tflops(flops: float, ms: float) -> float:
    return flops / (ms * 1e-3) / 1e12


def tbps(nbytes: float, ms: float) -> float:
    """Terabytes per second for `nbytes` moved (reads + writes) in `ms` milliseconds."""
    return nbytes / (ms * 1e-3) / 1e12


def median_ms(fn: Callable[[], object], warmup_ms: int = 25, rep_ms: int = 100) -> float:
    """Median milliseconds of `fn()` on the GPU (triton.testing.do_bench, L2 flushed between runs)."""
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))


def bench_grid(
    head_dims: Iterable[int] = (64, 128, 256),
    seqlens: Iterable[int] = (4096, 8192, 16384),
    tokens: int = 16384,
    heads: int = 32,
    causal: Iterable[bool] = (False, True),
) -> list[AttentionCase]:
    """The issue's grid: batch * seqlen = `tokens`, `heads` query and kv heads."""
    return [
        AttentionCase(tokens // s, s, heads, heads, d, c)
        for d in head_dims
        for s in seqlens
        for c in causal
    ]


@dataclass
class Results:
    """Rows of measurements plus the context they were taken in."""

    context: dict
    rows: list[dict] = field(default_factory=list)
    meta: dict = field(default_factory=dict)


def write_results(path: str | Path, rows: list[dict], context: dict, **meta: object) -> Path:
    """Write `{"context", "meta", "rows"}` as JSON at `path` and the rows as CSV beside it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(Results(context, rows, dict(meta))), indent=1, default=str) + "\n")
    if rows:
        keys = list(dict.fromkeys(k for r in rows for k in r))
        with path.with_suffix(".csv").open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)
    return path


def load_results(path: str | Path) -> dict:
    """Read a results JSON written by `write_results`; it must carry a context block."""
    data = json.loads(Path(path).read_text())
    if "context" not in data or "rows" not in data:
        raise ValueError(f"{path}: expected a results file with 'context' and 'rows', got keys {sorted(data)}")
    return data


def ratio_table(rows: list[dict], ours: str, against: str, value: str = "tflops") -> list[dict]:
    """For each case present for both providers: {case, ours, against, ratio}.

    rows: dicts with keys 'case', 'provider' and `value`.
    """
    by = {(r["case"], r["provider"]): r[value] for r in rows if r.get(value) is not None}
    cases = list(dict.fromkeys(r["case"] for r in rows))
    out = []
    for c in cases:
        if (c, ours) in by and (c, against) in by:
            a, b = by[(c, ours)], by[(c, against)]
            out.append({"case": c, ours: a, against: b, "ratio": a / b})
    return out

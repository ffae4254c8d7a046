"""A paged FP8 KV cache, written and read the way vLLM's FlashAttention backend does.

vLLM keeps K and V in pages ("blocks") of `block_size` tokens:
  key_cache, value_cache: (num_blocks, block_size, heads_kv, head_dim)
A token's place is its slot, `block * block_size + offset`; `slot_mapping`
gives each new token's slot (negative = padding, skipped). With an FP8 cache
(`kv_cache_dtype` "fp8" or "fp8_e4m3") K and V are divided by their static
scales, saturated and cast to e4m3fn on write (`reshape_and_cache_flash`);
attention reads the pages through a block table with the scales passed as
descales, `k_scale.expand(num_seqs, heads_kv)`: stride 0.
Q is quantized with a static per-tensor q_scale (`scaled_fp8_quant`), which multiplies by
1 / scale where the cache write divides (`cache_fp8_quant`): near a rounding midpoint the two
can store neighbouring FP8 codes for the same x and scale.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pandas as pd
import torch

from fp8lab.formats import cast_to_fp8
from fp8lab.layout import check_count
from fp8lab.metrics import rel_l2
from fp8lab.reference import AccumulatorModel, attention_exact, attention_fa3_fp8, fa3_block_n, fa3_decode_splits
from fp8lab.scaling import check_finite

__all__ = [
    "CHECKPOINT",
    "KV_CACHE_DTYPES",
    "DecodeBatch",
    "FA3DecodeCall",
    "PagedKVCache",
    "attention_spread",
    "cache_fp8_quant",
    "cache_torch_dtype",
    "caches_for",
    "captured_varlen_providers",
    "decode_error_split",
    "decode_error_summary",
    "decode_error_table",
    "decode_split_eager_record",
    "decode_split_points",
    "decode_split_ranges",
    "decode_split_summary",
    "fa3_decode_call",
    "first_batch_without_splits",
    "format_runs",
    "graph_replay_equals_eager",
    "memory_table",
    "q_scale_misset",
    "recorded_graph_replays",
    "saturating_scales",
    "scale_choices",
    "scaled_fp8_quant",
    "split_counts_table",
    "split_effect_table",
    "storage_table",
    "stride0_equals_materialized",
    "value_ranges",
    "vllm_dynamic_scales",
    "kv_bytes_per_token",
    "paged_decode",
    "random_pages",
]

# vLLM's kv_cache_dtype names -> torch dtype, for the FlashAttention backend.
KV_CACHE_DTYPES: dict[str, torch.dtype | None] = {
    "auto": None,  # the model's dtype
    "fp8": torch.float8_e4m3fn,
    "fp8_e4m3": torch.float8_e4m3fn,
}
_REJECTED = {"fp8_e5m2": "FlashAttention's FP8 path takes e4m3 only; vLLM rejects fp8_e5m2 for it"}


def cache_torch_dtype(kv_cache_dtype: str, model_dtype: torch.dtype = torch.bfloat16) -> torch.dtype:
    """The torch dtype a vLLM `kv_cache_dtype` name stores K/V in, for FlashAttention."""
    if kv_cache_dtype in _REJECTED:
        raise ValueError(f"kv_cache_dtype={kv_cache_dtype!r}: {_REJECTED[kv_cache_dtype]}")
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(f"kv_cache_dtype: expected one of {sorted(KV_CACHE_DTYPES)}, got {kv_cache_dtype!r}")
    return KV_CACHE_DTYPES[kv_cache_dtype] or model_dtype


def kv_bytes_per_token(num_layers: int, heads_kv: int, head_dim: int, dtype: torch.dtype) -> int:
    """Bytes of K and V one token occupies across all layers."""
    num_layers, heads_kv, head_dim = (check_count(n, v, 1) for n, v in (
        ("num_layers", num_layers), ("heads_kv", heads_kv), ("head_dim", head_dim)))
    return 2 * num_layers * heads_kv * head_dim * torch.empty((), dtype=dtype).element_size()


def _check_scale(name: str, scale: float | torch.Tensor) -> torch.Tensor:
    if isinstance(scale, bool) or not isinstance(scale, (torch.Tensor, numbers.Real)):
        raise TypeError(f"{name}: expected a number or a one-element tensor, got {type(scale).__name__} {scale!r}")
    s = torch.as_tensor(scale, dtype=torch.float32)
    if s.numel() != 1:
        raise ValueError(f"{name}: expected one per-tensor scale, got shape {tuple(s.shape)}")
    if not (torch.isfinite(s) and s > 0):
        raise ValueError(f"{name}: expected a finite scale > 0, got {s.item()}")
    return s.reshape(())


def scaled_fp8_quant(x: torch.Tensor, scale: float | torch.Tensor) -> torch.Tensor:
    """vLLM's static per-tensor quantization of Q: `clamp(x * (1 / scale), ±448)` cast to e4m3fn
    (float32; the reciprocal rounded first, as `scaled_fp8_quant`'s kernel takes `1.0f / scale`).

    x: float tensor of any shape. Returns float8_e4m3fn of the same shape;
    `result.float() * scale` approximates x.
    """
    return _static_fp8(x, scale, "scaled_fp8_quant", lambda xf, s: xf * (1.0 / s))


def cache_fp8_quant(x: torch.Tensor, scale: float | torch.Tensor) -> torch.Tensor:
    """vLLM's FP8 cache write (`reshape_and_cache_flash`): `x / scale` in float32, saturated to
    ±448, cast to e4m3fn. x: float tensor of any shape; returns float8_e4m3fn of the same shape.
    """
    return _static_fp8(x, scale, "cache_fp8_quant", lambda xf, s: xf / s)


def _static_fp8(x: torch.Tensor, scale: float | torch.Tensor, name: str, apply) -> torch.Tensor:
    """e4m3fn of `apply(x in float32, scale)`, saturated: the two ways vLLM applies a static scale."""
    check_finite(x, name)
    s = _check_scale("scale", scale).to(x.device)
    return cast_to_fp8(apply(x.float(), s), "e4m3fn", overflow="saturate")


def vllm_dynamic_scales(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[float, float, float]:
    """vLLM's `calc_kv_scales` (deprecated 2026-03): from the first batch,
    q_scale = amax(q)/200, k_scale = amax(k)/200, v_scale = amax(v)/100.

    The divisors leave headroom below e4m3's 448 for later batches.
    """
    out = []
    for name, x, div in (("q", q, 200.0), ("k", k, 200.0), ("v", v, 100.0)):
        if not isinstance(x, torch.Tensor) or not x.numel():
            got = f"shape {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"vllm_dynamic_scales: {name}: expected a non-empty tensor to take its amax, got {got}")
        amax = x.detach().abs().max().float()
        if not torch.isfinite(amax):
            raise ValueError(f"vllm_dynamic_scales: {name} holds NaN or inf")
        out.append(max(amax.item() / div, torch.finfo(torch.float32).tiny))
    return out[0], out[1], out[2]


def _cu(lens: Sequence[int], device: torch.device | str = "cpu") -> torch.Tensor:
    """cu_seqlens of these lengths: int32 (len(lens) + 1,), starting at 0."""
    return torch.tensor([0, *torch.tensor(list(lens)).cumsum(0).tolist()], dtype=torch.int32, device=device)


def random_pages(context_lens: list[int], block_size: int, generator: torch.Generator,
                 num_blocks: int | None = None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Distinct random pages for each sequence, as an allocator hands them out after many requests.

    Returns (block_table int32 (num_seqs, max pages), -1 past a sequence's pages; slot_mapping int64
    (sum of lengths,), page * block_size + offset of each token in order; num_blocks). num_blocks
    defaults to the pages needed plus 3 unused ones.
    """
    block_size = check_count("block_size", block_size, 1)
    context_lens = [check_count("context_lens", n) for n in context_lens]
    need = [-(-n // block_size) for n in context_lens]
    num_blocks = sum(need) + 3 if num_blocks is None else check_count("num_blocks", num_blocks)
    if num_blocks < sum(need):
        raise ValueError(f"num_blocks: the sequences need {sum(need)} pages, got {num_blocks}")
    perm = torch.randperm(num_blocks, generator=generator)
    table = torch.full((len(context_lens), max(need, default=0)), -1, dtype=torch.int32)
    slots, used = [], 0
    for i, (n, p) in enumerate(zip(context_lens, need)):
        table[i, :p] = perm[used:used + p].int()
        slots.append((perm[used:used + p, None] * block_size + torch.arange(block_size)).flatten()[:n])
        used += p
    return table, torch.cat(slots) if slots else torch.zeros(0, dtype=torch.int64), num_blocks


@dataclass
class PagedKVCache:
    """One layer's paged KV cache.

    key_cache / value_cache: (num_blocks, block_size, heads_kv, head_dim) in
    `dtype` (float8_e4m3fn for an FP8 cache); k_scale / v_scale: per-tensor
    float32 scales (1.0 for a 16-bit cache).
    """

    key_cache: torch.Tensor
    value_cache: torch.Tensor
    k_scale: torch.Tensor
    v_scale: torch.Tensor
    kv_cache_dtype: str

    @classmethod
    def allocate(
        cls,
        num_blocks: int,
        block_size: int,
        heads_kv: int,
        head_dim: int,
        *,
        kv_cache_dtype: str = "fp8",
        k_scale: float = 1.0,
        v_scale: float = 1.0,
        model_dtype: torch.dtype = torch.bfloat16,
        device: torch.device | str = "cpu",
    ) -> "PagedKVCache":
        dtype = cache_torch_dtype(kv_cache_dtype, model_dtype)
        shape = tuple(check_count(name, n) for name, n in (("num_blocks", num_blocks), ("block_size", block_size),
                                                           ("heads_kv", heads_kv), ("head_dim", head_dim)))
        if min(shape) <= 0:
            raise ValueError(
                f"cache dimensions must be positive, got num_blocks={num_blocks}, block_size={block_size}, "
                f"heads_kv={heads_kv}, head_dim={head_dim}"
            )
        fp8 = dtype == torch.float8_e4m3fn
        if not fp8 and (k_scale != 1.0 or v_scale != 1.0):
            raise ValueError(f"k_scale/v_scale apply to an FP8 cache only, got kv_cache_dtype={kv_cache_dtype!r}")
        return cls(
            torch.zeros(shape, dtype=dtype, device=device),
            torch.zeros(shape, dtype=dtype, device=device),
            _check_scale("k_scale", k_scale).to(device),
            _check_scale("v_scale", v_scale).to(device),
            kv_cache_dtype,
        )

    @property
    def block_size(self) -> int:
        return self.key_cache.shape[1]

    @property
    def fp8(self) -> bool:
        return self.key_cache.dtype == torch.float8_e4m3fn

    def write(self, key: torch.Tensor, value: torch.Tensor, slot_mapping: torch.Tensor) -> None:
        """`reshape_and_cache_flash`: store new tokens' K/V at their slots.

        key/value: (num_tokens, heads_kv, head_dim) float; slot_mapping: int64
        (num_tokens,), negative entries are padding and are skipped.
        """
        num_blocks, block_size, heads_kv, head_dim = self.key_cache.shape
        for name, t in (("key", key), ("value", value), ("slot_mapping", slot_mapping)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if key.shape != value.shape or key.dim() != 3 or key.shape[1:] != (heads_kv, head_dim):
            raise ValueError(
                f"key/value: expected (num_tokens, {heads_kv}, {head_dim}) each, got {tuple(key.shape)} and {tuple(value.shape)}"
            )
        if slot_mapping.dtype != torch.int64 or slot_mapping.shape != (key.shape[0],):
            raise ValueError(
                f"slot_mapping: expected int64 of shape ({key.shape[0]},), got {slot_mapping.dtype} {tuple(slot_mapping.shape)}"
            )
        for name, t in (("key", key), ("value", value)):
            check_finite(t, name)
        keep = slot_mapping >= 0
        slots = slot_mapping[keep]
        if slots.numel() and int(slots.max()) >= num_blocks * block_size:
            raise ValueError(f"slot_mapping: slot {int(slots.max())} is past the cache's {num_blocks * block_size} slots")
        if slots.numel() != slots.unique().numel():
            raise ValueError("slot_mapping: two tokens write the same slot")
        for cache, x, scale in ((self.key_cache, key, self.k_scale), (self.value_cache, value, self.v_scale)):
            x = x[keep]
            stored = cache_fp8_quant(x, scale) if self.fp8 else x.to(cache.dtype)
            cache.view(-1, heads_kv, head_dim)[slots] = stored

    def gather(self, block_table: torch.Tensor, seq_lens: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Read each sequence's K/V through its block table, as a varlen batch.

        block_table: int (num_seqs, max_blocks) of page indices; seq_lens: tokens
        per sequence. Returns k, v (total_k, heads_kv, head_dim) in the cache's
        dtype and cu_seqlens_k int32 (num_seqs + 1,).
        """
        if not len(seq_lens):
            raise ValueError("seq_lens: expected at least one sequence, got 0")
        bad = [n for n in seq_lens if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0]
        if bad:
            raise ValueError(f"seq_lens: expected token counts, ints >= 0, got {bad[0]!r} in {list(seq_lens)}")
        if not isinstance(block_table, torch.Tensor) or block_table.dtype.is_floating_point or block_table.dim() != 2 \
                or block_table.shape[0] != len(seq_lens):
            got = (f"{block_table.dtype} {tuple(block_table.shape)}" if isinstance(block_table, torch.Tensor)
                   else type(block_table).__name__)
            raise ValueError(f"block_table: expected an int tensor ({len(seq_lens)}, max_blocks) for {len(seq_lens)} "
                             f"sequences, got {got}")
        bs, num_blocks = self.block_size, self.key_cache.shape[0]
        ks, vs = [], []
        for i, (row, n) in enumerate(zip(block_table, seq_lens)):
            need = -(-n // bs)
            if need > row.numel():
                raise ValueError(f"sequence {i}: {n} tokens need {need} pages, its block table row has {row.numel()}")
            pages = row[:need].long()
            bad = ((pages < 0) | (pages >= num_blocks)).nonzero()
            if bad.numel():  # -1 marks no page (random_pages); negative indices would read another sequence's
                j = int(bad[0, 0])
                raise ValueError(f"sequence {i}: {n} tokens need {need} pages, but block_table[{i}, {j}] = "
                                 f"{int(pages[j])} is not a page of the cache's {num_blocks}")
            ks.append(self.key_cache[pages].flatten(0, 1)[:n])
            vs.append(self.value_cache[pages].flatten(0, 1)[:n])
        cu = _cu(seq_lens, self.key_cache.device)
        return torch.cat(ks), torch.cat(vs), cu

    def descales(self, num_seqs: int) -> tuple[torch.Tensor, torch.Tensor]:
        """k/v descales in FA3's layout, as vLLM passes them: `scale.expand(num_seqs, heads_kv)` (stride 0)."""
        num_seqs, heads_kv = check_count("num_seqs", num_seqs), self.key_cache.shape[2]
        return self.k_scale.expand(num_seqs, heads_kv), self.v_scale.expand(num_seqs, heads_kv)


DECODE_MATH = ("fa3_fp8", "dequantized")


def paged_decode(
    q: torch.Tensor,
    cache: PagedKVCache,
    block_table: torch.Tensor,
    seq_lens: list[int],
    *,
    math: str = "fa3_fp8",
    q_scale: float | None = None,
    softmax_scale: float | None = None,
    block_n: int | None = None,
    num_splits: int | Sequence[int] | None = None,
    accumulator: AccumulatorModel | Literal["vllm"] | None = "vllm",
    num_sms: int = 132,
) -> torch.Tensor:
    """One decode step (one new query token per sequence) over a paged cache.

    q: (num_seqs, heads_q, head_dim) float, not yet quantized (an FP8 q: TypeError). `math` picks how
    the FP8 cache is used:
      "fa3_fp8"     FA3's FP8 path as vLLM's FA3 library runs a decode step on an H200: Q
                    quantized with the static `q_scale`, all three descales `expand()`ed, the
                    FA3 emulation (`fp8lab.reference.attention_fa3_fp8`) with the library's decode
                    key block (block_n None: `fa3_block_n(d, flavor="vllm", decode=True)`, 128 / 96 /
                    128 keys at head dims 64 / 128 / 256), its split-KV count per sequence (num_splits
                    None: `fa3_decode_splits` for vLLM's eager call on `num_sms` SMs; an int is what
                    the caller passes FA3, a list one count per sequence), and Hopper's FP8 MMA
                    accumulator flushed into fp32 every block ("vllm"; None: exact fp32 sums). On an
                    H200 this gave 70-92 % of the library's bf16 outputs bit for bit
                    (results/h200/decode_fidelity*.json, `scripts/gpu_decode_fidelity.py`).
      "dequantized" FlashInfer's approach: K/V upcast with their scales, Q kept
                    as given, exact float64 math; isolates the storage error.
    Returns (num_seqs, heads_q, head_dim): bf16 ("fa3_fp8") or float64 ("dequantized").
    """
    if math not in DECODE_MATH:
        raise ValueError(f"math: expected one of {DECODE_MATH}, got {math!r}")
    if not len(seq_lens):
        raise ValueError("seq_lens: expected at least one sequence, got 0")
    check_finite(q, "q")
    if q.dim() != 3 or q.shape[0] != len(seq_lens):
        raise ValueError(f"q: expected (num_seqs={len(seq_lens)}, heads_q, head_dim), got {tuple(q.shape)}")
    k, v, cu_k = cache.gather(block_table, seq_lens)
    n = len(seq_lens)
    cu_q = torch.arange(n + 1, dtype=torch.int32, device=q.device)
    varlen = dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=1, max_seqlen_k=max(seq_lens), causal=True,
                  softmax_scale=softmax_scale)
    if math == "dequantized":  # float64 throughout, q too (attention_exact takes one dtype)
        return attention_exact(q.double(), k.double() * cache.k_scale.double(), v.double() * cache.v_scale.double(),
                               **varlen)
    if not cache.fp8:
        raise ValueError(f"math='fa3_fp8' needs an FP8 cache, got kv_cache_dtype={cache.kv_cache_dtype!r}")
    if q_scale is None:
        raise ValueError("math='fa3_fp8' needs the static q_scale vLLM quantizes Q with: a checkpoint's, or for a "
                         "checkpoint without one 1.0 (vLLM's fallback to k_scale is overwritten; "
                         "fp8lab.scaling.resolve_checkpoint_scales)")
    q8 = scaled_fp8_quant(q, q_scale)
    heads_kv, d = cache.key_cache.shape[2], cache.key_cache.shape[3]
    k_descale, v_descale = cache.descales(n)
    q_descale = _check_scale("q_scale", q_scale).to(q.device).expand(n, heads_kv)
    group = q.shape[1] // heads_kv
    if block_n is None:  # one MMA warpgroup (vLLM at head dim 128) where a tile holds at most 64 rows
        block_n = fa3_block_n(d, flavor="vllm", decode=group <= 64)
    if isinstance(num_splits, numbers.Integral) and (isinstance(num_splits, bool) or num_splits < 0):
        raise ValueError(f"num_splits: expected None, an int >= 0 (0: FA3's heuristic) or one count per sequence, "
                         f"got {num_splits!r}")
    if num_splits is None or isinstance(num_splits, numbers.Integral):
        num_splits = fa3_decode_splits(seq_lens, heads_kv, block_n, num_splits=int(num_splits or 0), num_sms=num_sms,
                                       group=group)
    if accumulator == "vllm":
        accumulator = AccumulatorModel(13, promote_every=block_n)  # HOPPER_FP8_MMA, flushed every key block
    return attention_fa3_fp8(q8, k, v, q_descale, k_descale, v_descale, block_n=block_n, num_splits=num_splits,
                             accumulator=accumulator, **varlen)


# ---------------------------------------------------------------------------
# Notebook 06's experiments: each returns a table or a figure the notebook shows.


def memory_table(num_layers: int, heads_kv: int, head_dim: int, memory_gib: float,
                 kv_cache_dtypes: Sequence[str] = ("auto", "fp8"), model_dtype: torch.dtype = torch.bfloat16
                 ) -> pd.DataFrame:
    """What each `kv_cache_dtype` stores and how many tokens `memory_gib` GiB of cache hold.

    One row per dtype; columns kv_cache_dtype, "stored as" (the torch dtype's name), "bytes/token"
    (K and V of all layers, `kv_bytes_per_token`), "tokens in cache" and "tokens vs first" (over the
    first row's).
    """
    if not 0 < memory_gib < float("inf"):
        raise ValueError(f"memory_gib: expected GiB > 0, got {memory_gib!r}")
    if isinstance(kv_cache_dtypes, str) or not len(kv_cache_dtypes):
        raise ValueError(f"kv_cache_dtypes: expected one or more names such as ('auto', 'fp8'), got "
                         f"{kv_cache_dtypes!r}")
    rows = []
    for name in kv_cache_dtypes:
        dtype = cache_torch_dtype(name, model_dtype)
        per_token = kv_bytes_per_token(num_layers, heads_kv, head_dim, dtype)
        rows.append({"kv_cache_dtype": name, "stored as": str(dtype).replace("torch.", ""), "bytes/token": per_token,
                     "tokens in cache": int(memory_gib * 2**30 // per_token)})
    table = pd.DataFrame(rows)
    table["tokens vs first"] = table["tokens in cache"] / table["tokens in cache"].iloc[0]
    return table


@dataclass
class DecodeBatch:
    """One decode step's data: one new query token per sequence, the sequences' cached K and V, and
    the pages those tokens live in.

    q: float64 (num_seqs, heads_q, head_dim); k, v: float64 (sum of seq_lens, heads_kv, head_dim),
    the sequences' tokens one after the other (a varlen batch); seq_lens: tokens per sequence;
    block_table int32 (num_seqs, max pages), slot_mapping int64 (sum of seq_lens,) and num_blocks as
    `random_pages` gives them for pages of `block_size` tokens.
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    seq_lens: list[int]
    block_table: torch.Tensor
    slot_mapping: torch.Tensor
    num_blocks: int
    block_size: int

    @classmethod
    def draw(cls, seq_lens: Sequence[int], *, heads_q: int, heads_kv: int, head_dim: int, block_size: int,
             generator: torch.Generator, page_generator: torch.Generator | None = None, q_std: float = 3.0,
             k_outlier_channels: int = 4, k_outlier_scale: float = 12.0, v_std: float = 0.5) -> "DecodeBatch":
        """Random pages, then K, V and Q drawn the way real activations look: K ~ N(0, 1) with its
        first `k_outlier_channels` channels `k_outlier_scale` times larger, V ~ N(0, v_std^2), Q ~
        N(0, q_std^2) (Q's values larger than K's and V's in RMS, K's outlier channels giving K the
        largest amax). The pages come from `page_generator` (default: `generator`, drawn first), the
        data from `generator`, in the order k, v, q.
        """
        lens = [check_count("seq_lens", n) for n in seq_lens]
        if not lens or min(lens) < 1:
            raise ValueError(f"seq_lens: expected one or more lengths >= 1, got {list(seq_lens)}")
        heads_q, heads_kv, head_dim = (check_count(n, v, 1) for n, v in (("heads_q", heads_q), ("heads_kv", heads_kv),
                                                                          ("head_dim", head_dim)))
        if heads_q % heads_kv or not 0 <= k_outlier_channels <= head_dim:
            raise ValueError(f"expected heads_q a multiple of heads_kv and 0 <= k_outlier_channels <= head_dim, got "
                             f"heads_q={heads_q}, heads_kv={heads_kv}, k_outlier_channels={k_outlier_channels}, "
                             f"head_dim={head_dim}")
        table, slots, num_blocks = random_pages(lens, block_size, page_generator or generator)
        total = sum(lens)
        k = torch.randn(total, heads_kv, head_dim, generator=generator, dtype=torch.float64)
        k[..., :k_outlier_channels] *= k_outlier_scale
        v = torch.randn(total, heads_kv, head_dim, generator=generator, dtype=torch.float64) * v_std
        q = torch.randn(len(lens), heads_q, head_dim, generator=generator, dtype=torch.float64) * q_std
        return cls(q, k, v, lens, table, slots, num_blocks, block_size)

    def with_queries(self, q: torch.Tensor) -> "DecodeBatch":
        """The same cache contents and pages with other queries, float64 of q's shape."""
        if q.shape != self.q.shape:
            raise ValueError(f"q: expected the batch's query shape {tuple(self.q.shape)}, got {tuple(q.shape)}")
        return dataclasses.replace(self, q=q.to(torch.float64))

    def with_random_queries(self, std: float, generator: torch.Generator) -> "DecodeBatch":
        """The same cache contents and pages with queries drawn N(0, std^2) from `generator`."""
        if not std > 0:
            raise ValueError(f"std: expected > 0, got {std!r}")
        return self.with_queries(torch.randn(self.q.shape, generator=generator, dtype=torch.float64) * std)

    @property
    def cu_seqlens_k(self) -> torch.Tensor:
        return _cu(self.seq_lens)

    def exact(self) -> torch.Tensor:
        """Exact float64 attention of each query over its sequence's keys: (num_seqs, heads_q, head_dim)."""
        cu_q = torch.arange(len(self.seq_lens) + 1, dtype=torch.int32)
        return attention_exact(self.q, self.k, self.v, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=self.cu_seqlens_k)

    def cache(self, k_scale: float, v_scale: float) -> PagedKVCache:
        """An FP8 cache with these scales, holding the batch's K and V at their slots."""
        cache = PagedKVCache.allocate(self.num_blocks, self.block_size, self.k.shape[1], self.k.shape[2],
                                      k_scale=k_scale, v_scale=v_scale)
        cache.write(self.k, self.v, self.slot_mapping)
        return cache


def value_ranges(**tensors: torch.Tensor) -> pd.DataFrame:
    """RMS and amax of each named tensor (index: the names; columns rms, amax)."""
    return pd.DataFrame({name: {"rms": float(x.double().square().mean().sqrt()), "amax": float(x.double().abs().max())}
                         for name, x in tensors.items()}).T


CHECKPOINT = "checkpoint (amax/448)"


def scale_choices(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> dict[str, tuple[float, float, float]]:
    """(q_scale, k_scale, v_scale) for each way vLLM can come by its scales, all descales:

    CHECKPOINT: calibrated offline, amax/448 of this very data (the best a static scale can do);
    "checkpoint k/v only, vLLM (q 1.0)" and "... intended (q = k_scale)": a checkpoint without
    q_scale, as vLLM runs it and as it means to; "default 1.0": no scales at all; "dynamic (amax/200,
    /100)": `vllm_dynamic_scales`.
    """
    ck = tuple(x.abs().max().item() / 448 for x in (q, k, v))
    return {
        CHECKPOINT: ck,
        "checkpoint k/v only, vLLM (q 1.0)": (1.0, ck[1], ck[2]),
        "checkpoint k/v only, intended (q = k_scale)": (ck[1], ck[1], ck[2]),
        "default 1.0": (1.0, 1.0, 1.0),
        "dynamic (amax/200, /100)": vllm_dynamic_scales(q, k, v),
    }


def caches_for(batch: DecodeBatch, choices: dict[str, tuple[float, float, float]]
               ) -> dict[str, tuple[float, PagedKVCache]]:
    """label -> (q_scale, the batch's K and V written into an FP8 cache with that choice's k/v scales)."""
    return {label: (qs, batch.cache(ks, vs)) for label, (qs, ks, vs) in choices.items()}


def storage_table(batch: DecodeBatch, caches: dict[str, tuple[float, PagedKVCache]]) -> pd.DataFrame:
    """What storing K and V in each cache does to them, read back through the block table.

    One row per (scales, tensor); columns scales, tensor ("K", "V"), scale, "clipped %" (values beyond
    448 after division by the scale, past rounding), "stored as ±448 %", "flushed to 0 %" (nonzero
    values stored as 0), "rel L2 of storage" (the dequantized tensor against the original).
    """
    rows = []
    for label, (_, cache) in caches.items():
        k8, v8, _ = cache.gather(batch.block_table, batch.seq_lens)
        for name, x, x8, s in (("K", batch.k, k8, cache.k_scale), ("V", batch.v, v8, cache.v_scale)):
            stored = x8.double() * s.double()
            rows.append({"scales": label, "tensor": name, "scale": s.item(),
                         "clipped %": 100 * ((x / s.double()).abs() > 448 * (1 + 2**-20)).double().mean().item(),
                         "stored as ±448 %": 100 * (x8.double().abs() == 448).double().mean().item(),
                         "flushed to 0 %": 100 * ((x8.double() == 0) & (x != 0)).double().mean().item(),
                         "rel L2 of storage": rel_l2(stored, x)})
    return pd.DataFrame(rows)


def decode_error_table(batch: DecodeBatch, caches: dict[str, tuple[float, PagedKVCache]]) -> pd.DataFrame:
    """The decode step's error against exact float64 attention, for each cache, by `paged_decode` math.

    Index scales (the caches' labels, in order); columns "dequantized" (the storage error alone: K/V
    upcast, Q and the math exact) and "fa3_fp8" (FA3's FP8 path: Q cast with its q_scale, P cast,
    bf16 out), rel L2 vs exact; "fa3_fp8 adds" (fa3_fp8 / dequantized - 1), "fa3_fp8 vs dequantized"
    (rel L2 between the two outputs: how far FP8 math moves the output) and "Q cast rel L2" (Q's
    own round trip with that q_scale).
    """
    exact = batch.exact()
    rows = {}
    for label, (qs, cache) in caches.items():
        outs = {m: paged_decode(batch.q, cache, batch.block_table, batch.seq_lens, math=m, q_scale=qs).double()
                for m in ("dequantized", "fa3_fp8")}
        rows[label] = {"dequantized": rel_l2(outs["dequantized"], exact), "fa3_fp8": rel_l2(outs["fa3_fp8"], exact),
                       "fa3_fp8 vs dequantized": rel_l2(outs["fa3_fp8"], outs["dequantized"]),
                       "Q cast rel L2": rel_l2(scaled_fp8_quant(batch.q, qs).double() * qs, batch.q)}
    table = pd.DataFrame.from_dict(rows, orient="index").rename_axis("scales")
    table.insert(2, "fa3_fp8 adds", table["fa3_fp8"] / table["dequantized"] - 1)
    return table


def decode_error_summary(decode: pd.DataFrame, storage: pd.DataFrame) -> dict[str, tuple[float, float]]:
    """(min, max) over the rows of `decode_error_table` of: "fa3_fp8 adds", "dequantized / storage"
    (the decode error over the largest storage error of `storage_table`), "Q cast rel L2",
    "fa3_fp8 vs dequantized" and "dequantized"."""
    worst = storage["rel L2 of storage"].max()
    cols = {"fa3_fp8 adds": decode["fa3_fp8 adds"], "dequantized / storage": decode["dequantized"] / worst,
            "Q cast rel L2": decode["Q cast rel L2"], "fa3_fp8 vs dequantized": decode["fa3_fp8 vs dequantized"],
            "dequantized": decode["dequantized"]}
    return {name: (float(c.min()), float(c.max())) for name, c in cols.items()}


def attention_spread(batch: DecodeBatch) -> torch.Tensor:
    """How many keys each decode query's exact softmax spreads over: 1 / sum(p^2), float64
    (num_seqs, heads_q); 1 where one key takes all the weight, n where n keys share it equally."""
    group = batch.q.shape[1] // batch.k.shape[1]
    scale = batch.q.shape[-1] ** -0.5
    out = torch.empty(batch.q.shape[:2], dtype=torch.float64)
    cu = batch.cu_seqlens_k.tolist()
    for i in range(len(batch.seq_lens)):
        keys = batch.k[cu[i]:cu[i + 1]].repeat_interleave(group, dim=1)  # (n, heads_q, d)
        p = torch.softmax(torch.einsum("hd,nhd->hn", batch.q[i], keys) * scale, dim=-1)
        out[i] = 1 / p.square().sum(-1)
    return out


def decode_error_split(cases: dict[str, DecodeBatch]) -> pd.DataFrame:
    """Storage error against FP8-math error for decode batches that differ in how sharp their softmax is.

    Each case gets the checkpoint scales (amax/448 of its own q, k, v). Index: the cases; columns
    "keys per query" (mean sequence length), "effective keys" (median of `attention_spread`),
    "storage rel L2" (the worse of K's and V's, `storage_table`), "dequantized" and "fa3_fp8" (rel L2
    vs exact, `decode_error_table`), "fa3_fp8 vs dequantized" (how far FP8 math moves the output), and
    the two errors in units of the storage rounding: "dequantized / storage" and "fa3_fp8 vs
    dequantized / storage".
    """
    rows = {}
    for name, batch in cases.items():
        caches = caches_for(batch, {CHECKPOINT: scale_choices(batch.q, batch.k, batch.v)[CHECKPOINT]})
        dec = decode_error_table(batch, caches).loc[CHECKPOINT]
        storage = storage_table(batch, caches)["rel L2 of storage"].max()
        rows[name] = {"keys per query": sum(batch.seq_lens) / len(batch.seq_lens),
                      "effective keys": float(attention_spread(batch).median()), "storage rel L2": storage,
                      "dequantized": dec["dequantized"], "fa3_fp8": dec["fa3_fp8"],
                      "fa3_fp8 vs dequantized": dec["fa3_fp8 vs dequantized"],
                      "dequantized / storage": dec["dequantized"] / storage,
                      "fa3_fp8 vs dequantized / storage": dec["fa3_fp8 vs dequantized"] / storage}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("case")


@dataclass
class FA3DecodeCall:
    """What vLLM hands FA3's varlen FP8 call for one decode step over a paged cache (pages gathered).

    q8: float8_e4m3fn (num_seqs, heads_q, d); k8, v8: float8_e4m3fn (total keys, heads_kv, d);
    q_scale, k_scale, v_scale: the per-tensor scales; cu_seqlens_q/k int32 (num_seqs + 1,);
    max_seqlen_k: the longest sequence.
    """

    q8: torch.Tensor
    k8: torch.Tensor
    v8: torch.Tensor
    q_scale: float
    k_scale: float
    v_scale: float
    cu_seqlens_q: torch.Tensor
    cu_seqlens_k: torch.Tensor
    max_seqlen_k: int

    def descales(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """float32 (num_seqs, heads_kv) q/k/v descales on q8's device, made as vLLM makes them:
        a scalar `expand()`ed, strides (0, 0)."""
        n, heads_kv = self.q8.shape[0], self.k8.shape[1]
        return tuple(torch.tensor(float(s), dtype=torch.float32, device=self.q8.device).expand(n, heads_kv)
                     for s in (self.q_scale, self.k_scale, self.v_scale))

    def varlen(self) -> dict:
        """The varlen keyword arguments: cu_seqlens, max_seqlen_q=1, max_seqlen_k, causal=True."""
        return dict(cu_seqlens_q=self.cu_seqlens_q, cu_seqlens_k=self.cu_seqlens_k, max_seqlen_q=1,
                    max_seqlen_k=self.max_seqlen_k, causal=True)

    def to(self, device: torch.device | str, copy: bool = False) -> "FA3DecodeCall":
        """The call with its tensors on `device` (copies where `copy`, even on the same device)."""
        return dataclasses.replace(self, **{f: getattr(self, f).to(device, copy=copy) for f in
                                            ("q8", "k8", "v8", "cu_seqlens_q", "cu_seqlens_k")})


def fa3_decode_call(batch: DecodeBatch, cache: PagedKVCache, q_scale: float) -> FA3DecodeCall:
    """The batch's decode step as FA3's inputs: Q quantized with `q_scale` (`scaled_fp8_quant`), K and V
    gathered from `cache` through the block table."""
    k8, v8, cu_k = cache.gather(batch.block_table, batch.seq_lens)
    return FA3DecodeCall(scaled_fp8_quant(batch.q, q_scale), k8, v8, float(q_scale), cache.k_scale.item(),
                         cache.v_scale.item(), torch.arange(len(batch.seq_lens) + 1, dtype=torch.int32), cu_k,
                         max(batch.seq_lens))


def stride0_equals_materialized(call: FA3DecodeCall) -> bool:
    """Whether the FA3 emulation gives the same bits with stride-0 descales as with the same values
    materialized (`contiguous()`)."""
    view = call.descales()
    out_view = attention_fa3_fp8(call.q8, call.k8, call.v8, *view, **call.varlen())
    out_copy = attention_fa3_fp8(call.q8, call.k8, call.v8, *(d.contiguous() for d in view), **call.varlen())
    return bool(torch.equal(out_view, out_copy))


def captured_varlen_providers(head_dim: int, device=None) -> pd.DataFrame:
    """Which attention providers take a varlen FP8 call eagerly and under CUDA-graph capture
    (`fp8lab.backends.gating`, every provider installed; device: a `gating.Device`, default a
    simulated Hopper). Columns provider, backend, eager and captured ("runs" or "no"), "why not,
    eager", "what capture adds" (the reasons capture adds)."""
    from fp8lab.backends import gating

    device = device or gating.Device((9, 0), "simulated H100")
    eager = gating.Request("fp8", head_dim, varlen=True)
    captured = gating.Request("fp8", head_dim, varlen=True, lengths_on_device=True)
    rows = []
    for name, spec in gating.PROVIDERS.items():
        before, _ = gating.provider_reasons(spec, device, eager, env={})
        after, _ = gating.provider_reasons(spec, device, captured, env={})
        rows.append({"provider": name, "backend": spec.backend, "eager": "runs" if not before else "no",
                     "captured": "runs" if not after else "no", "why not, eager": "; ".join(before),
                     "what capture adds": "; ".join(r for r in after if r not in before)})
    return pd.DataFrame(rows)


def graph_replay_equals_eager(call: FA3DecodeCall, next_q8: torch.Tensor, next_lens: Sequence[int], *,
                              device: torch.device | str = "cuda", attention: Callable | None = None,
                              capture: Callable | None = None) -> bool:
    """Capture the decode step `fp8lab.attention(call)` in a CUDA graph on `device` (stride-0 descales
    made there), copy the next step's query `next_q8` and lengths `next_lens` (the same tokens, none
    longer than `call.max_seqlen_k`) into the captured tensors, replay, and say whether the replay's
    output has the bits of an eager call on the same tensors.

    attention / capture replace `fp8lab.attention` and `fp8lab.bench.capture_graph` (tests). Raises
    fp8lab.BackendError where no provider takes the call.
    """
    lens = [int(n) for n in next_lens]
    if (len(lens) != call.q8.shape[0] or sum(lens) != call.k8.shape[0] or max(lens) > call.max_seqlen_k
            or min(lens) < 0):
        raise ValueError(f"next_lens: expected {call.q8.shape[0]} lengths >= 0 summing to the {call.k8.shape[0]} "
                         f"cached tokens, none above max_seqlen_k={call.max_seqlen_k}, got {lens}")
    if next_q8.shape != call.q8.shape or next_q8.dtype != call.q8.dtype:
        raise ValueError(f"next_q8: expected {call.q8.dtype} of shape {tuple(call.q8.shape)} (quantized as call.q8, "
                         f"`scaled_fp8_quant`), got {next_q8.dtype} of shape {tuple(next_q8.shape)}")
    if attention is None:
        from fp8lab import attention
    if capture is None:
        from fp8lab.bench import capture_graph as capture
    dev = call.to(device, copy=True)  # the replay writes into its query and lengths, not into the caller's
    dq, dk, dv = dev.descales()
    varlen = dev.varlen()

    def decode_step():
        return attention(dev.q8, dev.k8, dev.v8, q_descale=dq, k_descale=dk, v_descale=dv, **varlen)

    graph, replayed = capture(decode_step)  # an eager warm-up call, then the capture
    dev.q8.copy_(next_q8.to(dev.q8.device))
    varlen["cu_seqlens_k"].copy_(_cu(lens, dev.q8.device))  # read on the device at the replay
    graph.replay()
    return bool(torch.equal(replayed, decode_step()))


def recorded_graph_replays(results_dir: str | Path, name: str = "bench_v26_api_graph.json") -> pd.DataFrame:
    """The H200's record of CUDA-graph captures (`scripts/probe_api_graph.py`), the calls that ran eagerly.

    Columns call ("<backend> varlen" or "<backend> batched"), backend, varlen, result,
    replay_equals_eager, "cu_seqlens at the replay" (None: batched).
    """
    from fp8lab.bench import load_results

    rec = pd.DataFrame(load_results(Path(results_dir) / name)["rows"])
    rec = rec[rec["result"] != "eager failed"]
    rec = rec[["backend", "varlen", "result", "replay_equals_eager", "eager_lengths"]].rename(
        columns={"eager_lengths": "cu_seqlens at the replay"})
    rec.insert(0, "call", [f"{b} {'varlen' if v else 'batched'}" for b, v in zip(rec["backend"], rec["varlen"])])
    return rec


def format_runs(xs: Sequence[int]) -> str:
    """A list as text, `x × n` where it repeats one value."""
    xs = list(xs)
    return f"{xs[0]} × {len(xs)}" if len(xs) > 1 and len(set(xs)) == 1 else ", ".join(map(str, xs))


def split_counts_table(cases: dict[str, Sequence[int]], heads_kv: int, block_n: int, num_sms: int = 132
                       ) -> pd.DataFrame:
    """How FA3 splits each case's decode batch (`fa3_decode_splits`, vLLM's eager call).

    Index: the cases (name -> sequence lengths); columns "keys per sequence", "key blocks", "tiles
    without splits" (sequences x KV heads), "splits per sequence", "tiles with splits", and "splits"
    (the list, one count per sequence).
    """
    rows = {}
    for label, lens in cases.items():
        splits = fa3_decode_splits(list(lens), heads_kv, block_n, num_sms=num_sms)
        rows[label] = {"keys per sequence": format_runs(lens), "key blocks": format_runs([-(-n // block_n) for n in lens]),
                       "tiles without splits": len(lens) * heads_kv, "splits per sequence": format_runs(splits),
                       "tiles with splits": heads_kv * sum(splits), "splits": splits}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("case")


def split_effect_table(cases: dict[str, tuple[DecodeBatch, PagedKVCache, float]]) -> pd.DataFrame:
    """What FA3's split-KV does to a decode step (`paged_decode` split as FA3 would, and not split).

    cases: name -> (batch, its FP8 cache, q_scale). Index: the cases; columns "splits per sequence",
    "rel L2, FA3's splits" and "rel L2, no split" (vs exact attention), "bf16 outputs equal" (the
    fraction of the two outputs' elements with the same bits).
    """
    rows = {}
    for label, (batch, cache, qs) in cases.items():
        heads_kv, d = cache.key_cache.shape[2:]
        group = batch.q.shape[1] // heads_kv
        exact = batch.exact()
        with_splits = paged_decode(batch.q, cache, batch.block_table, batch.seq_lens, q_scale=qs)  # FA3's: the default
        no_split = paged_decode(batch.q, cache, batch.block_table, batch.seq_lens, q_scale=qs, num_splits=1)
        block_n = fa3_block_n(d, flavor="vllm", decode=group <= 64)
        rows[label] = {"splits per sequence": format_runs(fa3_decode_splits(batch.seq_lens, heads_kv, block_n,
                                                                            group=group)),
                       "rel L2, FA3's splits": rel_l2(with_splits.double(), exact),
                       "rel L2, no split": rel_l2(no_split.double(), exact),
                       "bf16 outputs equal": (with_splits == no_split).double().mean().item()}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("case")


def _eager(validation: pd.DataFrame) -> pd.DataFrame:
    need = {"case", "head_dim", "num_splits", "sequence", "predicted_splits", "equal_at_predicted",
            "equal_without_split"}
    if not need <= set(validation.columns):
        raise ValueError(f"expected `decode_split_record`'s columns, missing {sorted(need - set(validation.columns))}")
    return validation[validation.num_splits == 0]


def decode_split_eager_record(validation: pd.DataFrame) -> dict[str, list]:
    """The eager calls (num_splits 0) of `fp8lab.reference.experiments.decode_split_record`, one entry
    per sequence: {"predicted_splits", "equal_at_predicted", "equal_without_split"} lists."""
    eager = _eager(validation)
    return {c: eager[c].tolist() for c in ("predicted_splits", "equal_at_predicted", "equal_without_split")}


def decode_split_points(validation: pd.DataFrame) -> pd.DataFrame:
    """The eager calls in long form for a scatter: columns case, head_dim, predicted_splits, emulation
    ("split as predicted" or "not split") and equal (fraction of bf16 outputs bit-equal to the library's)."""
    points = _eager(validation).melt(id_vars=["case", "head_dim", "predicted_splits"],
                                     value_vars=["equal_at_predicted", "equal_without_split"],
                                     var_name="emulation", value_name="equal")
    points["emulation"] = points["emulation"].map({"equal_at_predicted": "split as predicted",
                                                   "equal_without_split": "not split"})
    return points


def decode_split_ranges(validation: pd.DataFrame) -> dict:
    """Ranges over the recorded sequences: "at predicted" and "without split" ((min, max) of the equal
    fractions over the eager calls' split sequences), "forced num_splits" (the counts passed other
    than 0) and "forced at predicted" (the smallest equal fraction split as predicted under them)."""
    eager = _eager(validation)
    split = eager[eager.predicted_splits > 1]
    forced = validation[validation.num_splits > 0]
    return {"at predicted": (float(split.equal_at_predicted.min()), float(split.equal_at_predicted.max())),
            "without split": (float(split.equal_without_split.min()), float(split.equal_without_split.max())),
            "forced num_splits": sorted(int(n) for n in set(forced.num_splits)),
            "forced at predicted": float(forced.equal_at_predicted.min()) if len(forced) else float("nan")}


def decode_split_summary(validation: pd.DataFrame) -> pd.DataFrame:
    """Per (case, head_dim) of the eager calls: sequences, splits (per sequence, as text), and the means
    over the sequences FA3 splits of equal_at_predicted and equal_without_split."""
    eager = _eager(validation)
    by_case = eager.groupby(["case", "head_dim"], sort=False)
    summary = by_case.agg(sequences=("sequence", "size"), splits=("predicted_splits", lambda x: format_runs(list(x))))
    split = eager[eager.predicted_splits > 1]
    means = split.groupby(["case", "head_dim"], sort=False)[["equal_at_predicted", "equal_without_split"]].mean()
    return summary.join(means.add_suffix(" (split sequences, mean)"))


def saturating_scales(choices: dict[str, tuple[float, float, float]], v: torch.Tensor, factor: float = 100.0
                      ) -> set[str]:
    """The labels of `choices` whose v_scale saturates `factor * v` (some |factor * v / v_scale| > 448)."""
    return {label for label, (_, _, vs) in choices.items() if bool((v * factor / vs).abs().max() > 448)}


def q_scale_misset(batch: DecodeBatch, cache: PagedKVCache, q_scale: float, factor: float = 8.0) -> dict[str, float]:
    """What a Q descale `factor` times too small does to FA3's FP8 decode: "growth" (rel L2 vs exact
    with q_scale / factor over with q_scale) and "saturated" (the fraction of Q's values beyond 448
    once divided by q_scale / factor)."""
    if isinstance(factor, bool) or not isinstance(factor, numbers.Real) or not 0 < factor < float("inf"):
        raise ValueError(f"factor: expected a finite number > 0 (how many times too small the Q descale is), "
                         f"got {factor!r}")
    exact = batch.exact()

    def err(qs: float) -> float:
        return rel_l2(paged_decode(batch.q, cache, batch.block_table, batch.seq_lens, q_scale=qs).double(), exact)

    return {"growth": err(q_scale / factor) / err(q_scale),
            "saturated": float(((batch.q / (q_scale / factor)).abs() > 448).double().mean())}


def first_batch_without_splits(seqlen: int, heads_kv: int, block_n: int, num_sms: int = 132, max_batch: int = 64
                               ) -> tuple[int, dict[int, int]]:
    """The smallest number of sequences of `seqlen` keys from which on (up to `max_batch`) FA3 splits
    none of them in vLLM's eager decode call, and the splits per sequence at each batch size 1..max_batch."""
    max_batch = check_count("max_batch", max_batch, 1)
    splits = {b: max(fa3_decode_splits([seqlen] * b, heads_kv, block_n, num_sms=num_sms)) for b in range(1, max_batch + 1)}
    split_at = [b for b, s in splits.items() if s > 1]
    first = (max(split_at) + 1) if split_at else 1
    if first > max_batch:
        raise ValueError(f"FA3 still splits at {max_batch} sequences of {seqlen} keys: raise max_batch")
    return first, splits

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

import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from fp8lab.formats import cast_to_fp8
from fp8lab.reference import AccumulatorModel, attention_exact, attention_fa3_fp8, fa3_block_n, fa3_decode_splits

__all__ = [
    "KV_CACHE_DTYPES",
    "PagedKVCache",
    "cache_fp8_quant",
    "cache_torch_dtype",
    "scaled_fp8_quant",
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
    if not x.is_floating_point():
        raise TypeError(f"{name}: expected a floating tensor, got {x.dtype}")
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


def random_pages(context_lens: list[int], block_size: int, generator: torch.Generator,
                 num_blocks: int | None = None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Distinct random pages for each sequence, as an allocator hands them out after many requests.

    Returns (block_table int32 (num_seqs, max pages), -1 past a sequence's pages; slot_mapping int64
    (sum of lengths,), page * block_size + offset of each token in order; num_blocks). num_blocks
    defaults to the pages needed plus 3 unused ones.
    """
    if block_size < 1 or any(n < 0 for n in context_lens):
        raise ValueError(f"expected block_size >= 1 and lengths >= 0, got {block_size} and {list(context_lens)}")
    need = [-(-n // block_size) for n in context_lens]
    num_blocks = sum(need) + 3 if num_blocks is None else num_blocks
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
        if min(num_blocks, block_size, heads_kv, head_dim) <= 0:
            raise ValueError(
                f"cache dimensions must be positive, got num_blocks={num_blocks}, block_size={block_size}, "
                f"heads_kv={heads_kv}, head_dim={head_dim}"
            )
        shape = (num_blocks, block_size, heads_kv, head_dim)
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
        cu = torch.tensor([0, *torch.tensor(seq_lens).cumsum(0).tolist()], dtype=torch.int32, device=self.key_cache.device)
        return torch.cat(ks), torch.cat(vs), cu

    def descales(self, num_seqs: int) -> tuple[torch.Tensor, torch.Tensor]:
        """k/v descales in FA3's layout, as vLLM passes them: `scale.expand(num_seqs, heads_kv)` (stride 0)."""
        heads_kv = self.key_cache.shape[2]
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

    q: (num_seqs, heads_q, head_dim) float. `math` picks how the FP8 cache is used:
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

"""Descales in FA3's layout: float32 `(batch, heads_kv)`, any strides.

FA3's `flash_api.cpp` checks only a descale's shape and hands `stride(0)` and
`stride(1)` to the kernel, which reads `descale[b * stride0 + h_kv * stride1]`.
So all of these are the same descale to FA3:

* `descale_from_scalar(s, B, H)`: `tensor(s).expand(B, H)`, strides (0, 0): one
  number, no memory per head (this is what vLLM passes);
* `descale_from_heads(v, B, layout="expand")`: per-head values broadcast over
  the batch, strides (0, 1);
* `layout="contiguous"`: a materialized (B, H) tensor, strides (H, 1);
* `layout="transposed"`: a (H, B) tensor's `.t()`, strides (1, B).

Q's descale is indexed by the KV head too: under GQA every query head of a
group shares one scale (`PerHead(heads_kv)` computes it as the max over the group).
"""

from __future__ import annotations

import itertools
import numbers
from typing import Literal

import torch

from fp8lab.layout import check_count, check_cu_seqlens, check_descale
from fp8lab.scaling.granularity import PerBlock, PerChannel, PerHead, PerTensor, PerToken, as_4d
from fp8lab.scaling.strategy import ScaleStrategy, quantize, quantize_with_descale

__all__ = [
    "as_contiguous_reads",
    "as_kernel_reads",
    "descale_from_scalar",
    "descale_from_heads",
    "descale_from_tokens",
    "group_max",
    "quantize_for_fa3",
]

Layout = Literal["expand", "contiguous", "transposed"]


def _positive_finite(name: str, t: torch.Tensor) -> None:
    if t.numel() and not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name}: every value must be finite, got {t.flatten()[:8].tolist()}")
    if t.numel() and not bool((t > 0).all()):
        raise ValueError(f"{name}: every value must be > 0, got min {t.min().item()}")


def descale_from_scalar(
    value: float | torch.Tensor,
    batch: int,
    heads_kv: int,
    *,
    device: torch.device | str | None = None,
    name: str = "descale",
) -> torch.Tensor:
    """A per-tensor descale as FA3 takes it: `tensor(value).expand(batch, heads_kv)`, strides (0, 0)."""
    batch, heads_kv = check_count("batch", batch, 0), check_count("heads_kv", heads_kv, 1)
    if not isinstance(value, (torch.Tensor, numbers.Real)) or isinstance(value, bool):
        raise TypeError(f"{name}: expected a number or a one-element tensor, got {type(value).__name__}")
    t = torch.as_tensor(value, dtype=torch.float32, device=device)
    if t.numel() != 1:
        raise ValueError(f"{name}: expected one number, got shape {tuple(t.shape)}")
    out = t.reshape(()).expand(batch, heads_kv)
    check_descale(name, out, batch, heads_kv, out.device)
    return out


def descale_from_heads(
    values: torch.Tensor,
    batch: int,
    *,
    layout: Layout = "expand",
    name: str = "descale",
) -> torch.Tensor:
    """Per-head descales `(heads_kv,)` or `(batch, heads_kv)` as a float32 `(batch, heads_kv)` tensor.

    layout "expand": `(heads_kv,)` values broadcast over the batch, strides (0, 1)
    (a `(batch, heads_kv)` input is returned as a view of itself);
    "contiguous": materialized, strides (heads_kv, 1);
    "transposed": stored as `(heads_kv, batch)` and returned as its `.t()`, strides (1, batch).
    The values are identical in every layout; only the memory differs.
    """
    if not isinstance(values, torch.Tensor):
        raise TypeError(f"{name}: expected a tensor of per-head values, got {type(values).__name__}")
    batch = check_count("batch", batch, 0)
    if values.dim() == 1:
        full = values.to(torch.float32).expand(batch, values.shape[0])
    elif values.dim() == 2 and values.shape[0] == batch:
        full = values.to(torch.float32)
    else:
        raise ValueError(f"{name}: expected per-head values (heads_kv,) or (batch={batch}, heads_kv), got {tuple(values.shape)}")
    heads_kv = full.shape[1]
    if layout == "expand":
        out = full
    elif layout == "contiguous":
        out = full.contiguous()
    elif layout == "transposed":
        out = full.t().contiguous().t()
    else:
        raise ValueError(f"{name}: layout must be 'expand', 'contiguous' or 'transposed', got {layout!r}")
    check_descale(name, out, batch, heads_kv, out.device)
    return out


def group_max(descale: torch.Tensor, heads_kv: int, *, name: str = "descale") -> torch.Tensor:
    """(batch, heads_q) per-query-head descales -> (batch, heads_kv): the max over each GQA group."""
    heads_kv = check_count("heads_kv", heads_kv, 1)
    if not isinstance(descale, torch.Tensor):
        raise TypeError(f"{name}: expected a (batch, heads_q) tensor, got {type(descale).__name__}")
    if descale.dim() != 2 or descale.shape[1] % heads_kv:
        raise ValueError(f"{name}: expected (batch, heads_q) with heads_q a multiple of heads_kv={heads_kv}, got {tuple(descale.shape)}")
    b, h = descale.shape
    return descale.reshape(b, heads_kv, h // heads_kv).amax(dim=2)


def descale_from_tokens(
    token_descale: torch.Tensor,
    heads_kv: int,
    *,
    cu_seqlens: torch.Tensor | None = None,
    name: str = "descale",
) -> torch.Tensor:
    """Per-token (or per-block) descales reduced to FA3's `(batch, heads_kv)`: the max per (sequence, KV head).

    token_descale: `(batch, tokens_or_blocks, heads)` or varlen `(total_tokens, heads)` with int32
    `cu_seqlens` `(batch + 1,)`; `heads` may be heads_q (then also the max over each GQA group).
    Cost: every token of a sequence/head is then quantized with the largest scale; a token
    whose amax is `r` times smaller loses `log2(r)` binades of FP8's range, and once its values
    fall below the format's min normal, precision (subnormals) and then the values themselves.
    """
    if not isinstance(token_descale, torch.Tensor):
        raise TypeError(f"{name}: expected a tensor, got {type(token_descale).__name__}")
    _positive_finite(name, token_descale)
    heads_kv = check_count("heads_kv", heads_kv, 1)
    if token_descale.dim() == 3:
        if token_descale.shape[1] == 0:
            raise ValueError(f"{name}: no tokens to take a descale from, got shape {tuple(token_descale.shape)}")
        per_head = token_descale.amax(dim=1)
    elif token_descale.dim() == 2:
        if cu_seqlens is None:
            raise ValueError(f"{name}: a varlen (total_tokens, heads) descale needs cu_seqlens")
        lengths = check_cu_seqlens("cu_seqlens", cu_seqlens, token_descale.shape[0], token_descale.device)
        bounds = [0, *itertools.accumulate(lengths)]
        if 0 in lengths:
            raise ValueError(f"cu_seqlens: an empty sequence has no tokens to take a descale from, got {bounds}")
        per_head = torch.stack([token_descale[a:b].amax(dim=0) for a, b in zip(bounds, bounds[1:])])
    else:
        raise ValueError(f"{name}: expected (batch, tokens, heads) or (total_tokens, heads), got {tuple(token_descale.shape)}")
    out = group_max(per_head, heads_kv, name=name).to(torch.float32)
    check_descale(name, out, out.shape[0], heads_kv, out.device)
    return out


def quantize_for_fa3(
    x: torch.Tensor,
    strategy: ScaleStrategy,
    heads_kv: int,
    *,
    batch: int | None = None,
    layout: Layout = "expand",
    name: str = "x",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize `x` with `strategy` and return `(x_fp8, descale)` with descale in FA3's `(batch, heads_kv)`.

    Per tensor -> expanded scalar; per head -> as is (per-query-head scales are reduced to
    the max of each GQA group); per token / per block -> the max per (sequence, KV head);
    in the reduced cases `x` is quantized again with the reduced descale. Per channel cannot be
    expressed as a (batch, heads_kv) descale: ValueError.
    `batch` defaults to x's batch (1 for a varlen 3-D tensor, which FA3 would index per sequence).
    For every strategy `dequantize(x_fp8, descale, PerHead(heads_kv))` gives x back up to rounding.
    """
    x4 = as_4d(x, name)
    batch = x4.shape[0] if batch is None else check_count("batch", batch, 0)
    if x.dim() == 4 and batch != x4.shape[0]:
        raise ValueError(f"batch: a 4-D {name} has its own batch, {x4.shape[0]}; got batch={batch} "
                         f"(batch is for a varlen 3-D {name}, one descale row per sequence)")
    heads_kv = check_count("heads_kv", heads_kv, 1)
    if x4.shape[2] % heads_kv:
        raise ValueError(f"heads_kv: expected a divisor of {name}'s {x4.shape[2]} heads (each KV head serves a group "
                         f"of query heads), got {heads_kv}")
    if not isinstance(strategy, ScaleStrategy):
        raise TypeError(f"strategy: expected a ScaleStrategy, got {type(strategy).__name__}")
    g = strategy.granularity
    if isinstance(g, PerChannel):
        raise ValueError(f"{name}: per-channel scales cannot be given to FA3, whose descales are (batch, heads_kv)")
    if isinstance(g, PerHead):
        groups = x4.shape[2] if g.heads_kv is None else int(g.heads_kv)  # scales per sequence
        if groups % heads_kv:  # each scale must fall within one KV head's group of query heads
            raise ValueError(f"{name}: expected a PerHead granularity whose number of scales per sequence is a "
                             f"multiple of heads_kv={heads_kv} (FA3's descale has one value per KV head), got {g!r}: "
                             f"{groups} scale(s) per sequence for x's {x4.shape[2]} heads")
    x_fp8, descale = quantize(x, strategy, name=name)
    if isinstance(g, PerTensor):
        return x_fp8, descale_from_scalar(descale, batch, heads_kv, device=x4.device, name=f"{name}_descale")
    if isinstance(g, PerHead):
        requantize = descale.shape[1] != heads_kv
        per_head = group_max(descale, heads_kv, name=f"{name}_descale") if requantize else descale
    elif isinstance(g, (PerToken, PerBlock)):
        requantize = True
        per_head = descale_from_tokens(descale, heads_kv, name=f"{name}_descale")
    else:
        raise ValueError(f"{name}: no FA3 descale for granularity {g!r}")
    if requantize:
        x_fp8 = quantize_with_descale(
            x, per_head, PerHead(heads_kv), fmt=strategy.fmt, saturate=strategy.saturate, name=name
        )
    values = per_head[0] if per_head.shape[0] == 1 and batch != 1 else per_head
    return x_fp8, descale_from_heads(values, batch, layout=layout, name=f"{name}_descale")


def as_contiguous_reads(descale: torch.Tensor) -> torch.Tensor | None:
    """What a kernel that assumed a contiguous (batch, heads_kv) descale would read: element
    `offset + b * heads_kv + h` of the storage behind it, or None where that runs past the storage
    (an expanded descale holds 1 or heads_kv floats). FA3 reads `as_kernel_reads` instead."""
    storage = _storage(descale)
    if not descale.numel():
        return descale.clone()
    index = descale.storage_offset() + torch.arange(descale.numel(), device=descale.device).reshape(descale.shape)
    return storage[index] if int(index.max()) < storage.numel() else None


def as_kernel_reads(descale: torch.Tensor) -> torch.Tensor:
    """What FA3's kernel reads for a (batch, heads_kv) descale: element `offset + b * stride(0) +
    h * stride(1)` of the storage behind it, as a new contiguous tensor. Equal to `descale` for every
    valid layout (expanded, contiguous, transposed views); a kernel that assumed contiguity would read
    `b * heads_kv + h` instead."""
    storage = _storage(descale)
    b, h = torch.meshgrid(torch.arange(descale.shape[0], device=descale.device),
                          torch.arange(descale.shape[1], device=descale.device), indexing="ij")
    return storage[descale.storage_offset() + b * descale.stride(0) + h * descale.stride(1)]


def _storage(descale: torch.Tensor) -> torch.Tensor:
    """The whole storage behind a (batch, heads_kv) descale, as a flat tensor of its dtype."""
    if descale.dim() != 2:
        raise ValueError(f"descale: expected (batch, heads_kv), got shape {tuple(descale.shape)}")
    return torch.tensor([], dtype=descale.dtype, device=descale.device).set_(descale.untyped_storage())

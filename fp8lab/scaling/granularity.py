"""Granularities: which elements share one scale.

Every granularity works on FA3's layouts, batched `(batch, seqlen, heads, head_dim)`
or varlen `(total_tokens, heads, head_dim)`; a 3-D tensor is handled as one
sequence, i.e. as `(1, total_tokens, heads, head_dim)`.

A granularity does two things:

* `rows(x4)` lays the tensor out as a `(groups, elements)` float64 matrix, one
  row per scale, so that max / percentile / MSE searches are one code path.
  Rows of a partial last token block are padded with NaN (no input may hold NaN:
  `fp8lab.scaling.quantize` rejects it first).
* `expand(descale, shape)` broadcasts a compact descale back onto the tensor.

Compact descale shapes for `x4 = (B, S, H, D)`:

| granularity          | compact shape       | FA3 can take it?                                  |
|----------------------|---------------------|---------------------------------------------------|
| `PerTensor()`        | `()`                | yes, `expand(B, H_kv)` (stride 0)                 |
| `PerHead(heads_kv)`  | `(B, H_kv)`         | yes, it *is* FA3's layout                         |
| `PerToken()`         | `(B, S, H)`         | no: reduce with a max over tokens first           |
| `PerBlock(n)`        | `(B, ceil(S/n), H)` | no: reduce with a max over blocks first           |
| `PerChannel()`       | `(B, H, D)`         | no: a per-channel scale cannot leave the matmul   |

Static and delayed scales are computed over the batch folded into the tokens,
so their compact shape has batch 1 and broadcasts over any batch.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch

__all__ = ["Granularity", "PerTensor", "PerHead", "PerToken", "PerBlock", "PerChannel", "as_4d", "fold_batch"]


def as_4d(x: torch.Tensor, name: str = "x") -> torch.Tensor:
    """View a batched (B, S, H, D) or varlen (T, H, D) tensor as 4-D (varlen -> B = 1)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if x.dim() == 4:
        return x
    if x.dim() == 3:
        return x.unsqueeze(0)
    raise ValueError(
        f"{name}: expected (batch, seqlen, heads, head_dim) or varlen (total_tokens, heads, head_dim), "
        f"got shape {tuple(x.shape)}"
    )


def fold_batch(x4: torch.Tensor) -> torch.Tensor:
    """(B, S, H, D) -> (1, B*S, H, D): the batch becomes more tokens (for static and delayed scales)."""
    b, s, h, d = x4.shape
    return x4.reshape(1, b * s, h, d)


class Granularity:
    """Base class; see the module docstring for the compact shapes."""

    name: str = "?"
    token_dependent: bool = False  # True if groups follow token positions (no static scales then)

    def compact_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        raise NotImplementedError

    def rows(self, x4: torch.Tensor) -> torch.Tensor:
        """`(groups, elements)` float64 view/copy of `x4`, one row per scale."""
        raise NotImplementedError

    def _expand(self, d: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
        raise NotImplementedError

    def check_shape(self, descale: torch.Tensor, shape: tuple[int, ...], name: str = "descale") -> None:
        """Raise unless `descale` has the compact shape for a tensor of 4-D `shape` (batch may be 1)."""
        if not isinstance(descale, torch.Tensor):
            raise TypeError(f"{name}: expected a tensor, got {type(descale).__name__}")
        if not descale.is_floating_point():
            raise TypeError(f"{name}: expected a floating-point tensor, got {descale.dtype}")
        want = self.compact_shape(shape)
        got = tuple(descale.shape)
        ok = got == want or (len(want) > 0 and len(got) == len(want) and got[0] == 1 and got[1:] == want[1:])
        if not ok:
            hint = f" (or batch 1: {(1, *want[1:])})" if want else ""
            raise ValueError(f"{name}: a {self.name} descale for a tensor of shape {shape} must have shape {want}{hint}, got {got}")

    def check(self, descale: torch.Tensor, shape: tuple[int, ...], name: str = "descale") -> None:
        """`check_shape`, then: every descale finite and > 0 as the float32 FA3 takes (a float64 descale
        outside float32's range would divide by 0 or inf)."""
        self.check_shape(descale, shape, name)
        d32 = descale.float()
        in32 = "" if descale.dtype == torch.float32 else " in float32"
        if d32.numel() and not bool(torch.isfinite(d32).all()):
            raise ValueError(f"{name}: every descale must be finite{in32}, got {descale.flatten()[:8].tolist()}...")
        if d32.numel() and not bool((d32 > 0).all()):
            raise ValueError(f"{name}: every descale must be > 0{in32}, got min {descale.min().item()}")

    def expand(self, descale: torch.Tensor, shape: tuple[int, ...], name: str = "descale") -> torch.Tensor:
        """Float64 descale broadcastable to a tensor of 4-D `shape`: the float32 value FA3 would take
        (quantize divides by it and dequantize multiplies by it, so both see one value)."""
        self.check(descale, shape, name)
        return self._expand(descale.float().double(), shape)

    def reduce_rows(self, values: torch.Tensor, shape: tuple[int, ...], batch: int | None = None) -> torch.Tensor:
        """Reshape one value per row (from `rows`) into the compact shape (batch overridable)."""
        want = self.compact_shape(shape if batch is None else (batch, *shape[1:]))
        return values.reshape(want)


@dataclass(frozen=True)
class PerTensor(Granularity):
    """One scale for the whole tensor (vLLM's static q/k/v scales, cuDNN)."""

    name = "tensor"

    def compact_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return ()

    def rows(self, x4: torch.Tensor) -> torch.Tensor:
        return x4.double().reshape(1, -1)

    def _expand(self, d: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
        return d


@dataclass(frozen=True)
class PerHead(Granularity):
    """One scale per (sequence, head group): FA3's `(batch, heads_kv)` descale.

    `heads_kv=None` gives each head its own scale. For Q under GQA pass the
    number of KV heads: the query heads `g*group .. (g+1)*group-1` that read KV
    head `g` share one scale (the max over them), because FA3 indexes Q's
    descale by the KV head.
    """

    heads_kv: int | None = None
    name = "head"

    def __post_init__(self) -> None:
        hk = self.heads_kv
        if hk is not None and (isinstance(hk, bool) or not isinstance(hk, numbers.Integral) or hk < 1):
            raise ValueError(f"PerHead: heads_kv must be a positive int or None (one scale per head), got {hk!r}")

    def _groups(self, heads: int) -> int:
        g = heads if self.heads_kv is None else int(self.heads_kv)
        if heads % g:
            raise ValueError(f"PerHead: heads ({heads}) must be a multiple of heads_kv ({self.heads_kv})")
        return g

    def compact_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return (shape[0], self._groups(shape[2]))

    def rows(self, x4: torch.Tensor) -> torch.Tensor:
        b, s, h, d = x4.shape
        g = self._groups(h)
        return x4.double().reshape(b, s, g, h // g, d).permute(0, 2, 1, 3, 4).reshape(b * g, -1)

    def _expand(self, d: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
        group = shape[2] // self._groups(shape[2])
        return d.repeat_interleave(group, dim=1)[:, None, :, None]


@dataclass(frozen=True)
class PerToken(Granularity):
    """One scale per (token, head): the amax over head_dim (vLLM's per-token-head KV scales)."""

    name = "token"
    token_dependent = True

    def compact_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(shape[:3])

    def rows(self, x4: torch.Tensor) -> torch.Tensor:
        return x4.double().reshape(-1, x4.shape[3])

    def _expand(self, d: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
        return d[..., None]


@dataclass(frozen=True)
class PerBlock(Granularity):
    """One scale per (sequence, block of `block_size` tokens, head), like FA3's block quantization."""

    block_size: int = 128
    name = "block"
    token_dependent = True

    def __post_init__(self) -> None:
        if not isinstance(self.block_size, int) or self.block_size < 1:
            raise ValueError(f"PerBlock: block_size must be a positive int, got {self.block_size!r}")

    def compact_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return (shape[0], math.ceil(shape[1] / self.block_size), shape[2])

    def rows(self, x4: torch.Tensor) -> torch.Tensor:
        b, s, h, d = x4.shape
        n = self.block_size
        nb = math.ceil(s / n)
        padded = torch.full((b, nb * n, h, d), float("nan"), dtype=torch.float64, device=x4.device)
        padded[:, :s] = x4
        return padded.reshape(b, nb, n, h, d).permute(0, 1, 3, 2, 4).reshape(b * nb * h, n * d)

    def _expand(self, d: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
        return d.repeat_interleave(self.block_size, dim=1)[:, : shape[1], :, None]


@dataclass(frozen=True)
class PerChannel(Granularity):
    """One scale per (sequence, head, channel): the amax over tokens (SageAttention's V scales)."""

    name = "channel"

    def compact_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return (shape[0], shape[2], shape[3])

    def rows(self, x4: torch.Tensor) -> torch.Tensor:
        return x4.double().permute(0, 2, 3, 1).reshape(-1, x4.shape[1])

    def _expand(self, d: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
        return d[:, None, :, :]

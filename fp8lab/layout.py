"""Attention tensor layouts and the input checks every implementation shares.

FA3's layouts:
  batched  q (batch, seqlen_q, heads_q, head_dim), k/v (batch, seqlen_k, heads_kv, head_dim)
  varlen   q (total_q, heads_q, head_dim), k/v (total_k, heads_kv, head_dim),
           with int32 cu_seqlens_q / cu_seqlens_k of shape (batch + 1,)
Descales are float32 (batch, heads_kv), any strides (stride 0 from expand() included).
"""

from __future__ import annotations

import math
import numbers
import operator
import struct
from dataclasses import dataclass
from typing import Iterator

import torch

__all__ = [
    "AttentionShape",
    "FP8_ATTENTION_DTYPES",
    "check_attention_inputs",
    "check_count",
    "check_cu_seqlens",
    "check_descale",
    "check_descale_values",
    "check_flag",
    "check_folded_scale",
    "check_max_offset",
    "check_positive",
    "check_softmax_scale",
    "check_values",
    "sequences",
]

FP8_ATTENTION_DTYPES = (torch.float8_e4m3fn,)
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_LOG2E = 1.4426950408889634  # log2(e): FA3 computes exp(x) as exp2(x * log2(e))


@dataclass(frozen=True)
class AttentionShape:
    """What `check_attention_inputs` learned about a call.

    `seqlens_q` / `seqlens_k` list each sequence's length (all equal when batched). They are
    None for a varlen call checked while a CUDA graph is captured: the lengths then live in
    cu_seqlens on the device only, and `bound_q` / `bound_k` hold the caller's max_seqlen_q/k.
    """

    batch: int
    heads_q: int
    heads_kv: int
    head_dim: int
    head_dim_v: int
    seqlens_q: tuple[int, ...] | None
    seqlens_k: tuple[int, ...] | None
    varlen: bool
    fp8: bool
    bound_q: int | None = None
    bound_k: int | None = None

    @property
    def lengths_on_host(self) -> bool:
        """Whether the sequence lengths are known here (False only for varlen under capture)."""
        return self.seqlens_q is not None

    @property
    def group_size(self) -> int:
        """Query heads per KV head (1 = MHA, heads_q = MQA)."""
        return self.heads_q // self.heads_kv

    @property
    def max_seqlen_q(self) -> int:
        return self.bound_q if self.seqlens_q is None else max(self.seqlens_q, default=0)

    @property
    def max_seqlen_k(self) -> int:
        return self.bound_k if self.seqlens_k is None else max(self.seqlens_k, default=0)


def _dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).replace("torch.", "")


def check_descale(
    name: str,
    descale: torch.Tensor | None,
    batch: int,
    heads_kv: int,
    device: torch.device | None = None,
    check_values: bool = True,
) -> None:
    """Check one FA3 descale: float32 `(batch, heads_kv)`, finite and > 0, on `device`.

    Any strides are accepted (FA3 passes stride(0)/stride(1) through), so an
    `expand()`ed scalar is fine. `None` means 1.0 and passes. `check_values=False`
    checks dtype, shape and device only, as FA3 does: reading a GPU tensor's values
    costs a device sync per descale and call.
    """
    if descale is None:
        return
    if not isinstance(descale, torch.Tensor):
        raise TypeError(f"{name}: expected a float32 tensor of shape ({batch}, {heads_kv}), got {type(descale).__name__}")
    if descale.dtype != torch.float32:
        raise TypeError(f"{name}: expected dtype float32, got {_dtype_name(descale)}")
    if tuple(descale.shape) != (batch, heads_kv):
        raise ValueError(
            f"{name}: expected shape (batch, heads_kv) = ({batch}, {heads_kv}), got {tuple(descale.shape)}"
        )
    if device is not None and descale.device != torch.device(device):
        raise ValueError(f"{name}: expected it on {device} like q, got {descale.device}")
    if not check_values:
        return
    if descale.numel() and not bool(torch.isfinite(descale).all()):
        bad = (~torch.isfinite(descale)).nonzero()[0].tolist()
        raise ValueError(f"{name}: every descale must be finite, got {descale[tuple(bad)].item()} at {tuple(bad)}")
    if descale.numel() and not bool((descale > 0).all()):
        raise ValueError(f"{name}: every descale must be > 0, got min {descale.min().item()}")


def _check_cu_seqlens_tensor(name: str, cu: torch.Tensor, device: torch.device) -> int:
    """dtype, shape and device of a cu_seqlens tensor; returns the batch it describes."""
    if not isinstance(cu, torch.Tensor):
        raise TypeError(f"{name}: expected an int32 tensor of shape (batch + 1,), got {type(cu).__name__}")
    if cu.dtype != torch.int32:  # torch.cumsum gives int64: the likeliest slip
        raise TypeError(f"{name}: expected int32 (FA3's), got {_dtype_name(cu)}; pass {name}.to(torch.int32)")
    if cu.dim() != 1 or cu.numel() < 2:
        raise ValueError(f"{name}: expected an int32 tensor of shape (batch + 1,) with batch >= 1, got "
                         f"shape {tuple(cu.shape)}")
    if cu.device != device:
        raise ValueError(f"{name}: expected it on {device} like q, got {cu.device}")
    if cu.stride(0) != 1:  # the kernels read entry i at cu + i, as FA3's do (it checks the same)
        raise ValueError(f"{name}: expected a contiguous tensor (stride 1), got stride {cu.stride(0)}; "
                         "pass cu_seqlens.contiguous()")
    return cu.numel() - 1


def check_cu_seqlens(name: str, cu: torch.Tensor, total: int, device: torch.device) -> tuple[int, ...]:
    """Check a varlen call's cu_seqlens: a contiguous int32 (batch + 1,) tensor on `device`, from 0,
    non-decreasing, ending at the `total` tokens; returns the sequence lengths (a device sync)."""
    _check_cu_seqlens_tensor(name, cu, device)
    values = cu.tolist()
    if values[0] != 0:
        raise ValueError(f"{name}: must start at 0, got {values[0]}")
    lengths = tuple(b - a for a, b in zip(values[:-1], values[1:]))
    if any(n < 0 for n in lengths):
        raise ValueError(f"{name}: must be non-decreasing, got {values}")
    if values[-1] != total:
        raise ValueError(f"{name}: last entry must equal the {total} tokens in the tensor, got {values[-1]}")
    return lengths


def _capturing(t: torch.Tensor) -> bool:
    """Whether t's GPU stream is capturing a CUDA graph (nothing may be read back then)."""
    return t.is_cuda and torch.cuda.is_current_stream_capturing()


def _check_bound(name: str, given: object, capturing: bool) -> int | None:
    """A varlen call's max_seqlen: None (not given; under capture an error) or an int >= 0."""
    if given is None:
        if capturing:
            raise ValueError(f"{name}: a varlen call captured in a CUDA graph needs max_seqlen_q and max_seqlen_k "
                             "(cu_seqlens cannot be read on the host while capturing; pass the longest sequence "
                             "the replays will see, as vLLM does), got None")
        return None
    return check_count(name, given)


def check_count(name: str, value: object, least: int = 0) -> int:
    """A count such as a batch or a max_seqlen: a Python or NumPy integer (not a bool or a float)
    >= `least`, else ValueError."""
    try:
        n = operator.index(value)
    except TypeError:
        n = None
    if isinstance(value, bool) or n is None or n < least:
        raise ValueError(f"{name}: expected an int >= {least}, got {value!r}")
    return n


def check_positive(name: str, value: object) -> float:
    """A finite real number > 0 (not a bool; NaN, inf, 0 and negatives fail), else ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value < math.inf:
        raise ValueError(f"{name}: expected a finite number > 0, got {value!r}")
    return float(value)


def check_values(name: str, values: object, example: str = "(0, 8)") -> list:
    """A sweep's values as a list: one or more real numbers (not bools) in a list, tuple or other
    iterable, else ValueError naming `name`. A bare number, or a str (read letter by letter: "08" would
    sweep "0" and "8"), is the usual slip."""
    if isinstance(values, torch.Tensor):
        values = values.tolist() if values.dim() == 1 else values
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ValueError(f"{name}: expected one or more numbers such as {example}, got {values!r}")
    out = list(values)
    bad = [x for x in out if isinstance(x, bool) or not isinstance(x, numbers.Real)]
    if not out or bad:
        raise ValueError(f"{name}: expected one or more numbers such as {example}, got {values!r}")
    return out


def check_attention_inputs(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    q_descale: torch.Tensor | None = None,
    k_descale: torch.Tensor | None = None,
    v_descale: torch.Tensor | None = None,
    cu_seqlens_q: torch.Tensor | None = None,
    cu_seqlens_k: torch.Tensor | None = None,
    max_seqlen_q: int | None = None,
    max_seqlen_k: int | None = None,
    check_values: bool = True,
) -> AttentionShape:
    """Validate an attention call in FA3's layouts and return its shape.

    Raises TypeError for dtypes and ValueError for shapes, devices, strides,
    cu_seqlens and descales, each naming the tensor, what was expected and what came.
    `check_values=False` leaves the descale values to the caller's `check_descale_values`
    (which can check softmax_scale's folded product in the same read).
    While a CUDA graph is being captured nothing is read back from the device (a capture forbids
    the sync; a replay runs no Python check anyway): descale values are not checked, and a
    varlen call must give max_seqlen_q and max_seqlen_k, which stand in for the lengths in
    cu_seqlens (their dtype, shape and device are checked; `AttentionShape.seqlens_q` is None).
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(
            f"q, k and v must share one dtype, got q {_dtype_name(q)}, k {_dtype_name(k)}, v {_dtype_name(v)}"
        )
    if q.dtype not in FP8_ATTENTION_DTYPES + _FLOAT_DTYPES:
        allowed = ", ".join(str(d).replace("torch.", "") for d in FP8_ATTENTION_DTYPES + _FLOAT_DTYPES)
        raise TypeError(f"q/k/v: expected one of {allowed}, got {_dtype_name(q)}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}")
    fp8 = q.dtype in FP8_ATTENTION_DTYPES
    if not fp8 and any(d is not None for d in (q_descale, k_descale, v_descale)):
        raise ValueError(f"descales apply to FP8 inputs only, got q/k/v in {_dtype_name(q)}")

    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    capturing = _capturing(q)
    bound_q = bound_k = None
    if varlen:
        if cu_seqlens_q is None or cu_seqlens_k is None:
            raise ValueError("varlen needs both cu_seqlens_q and cu_seqlens_k, got only one")
        for name, t in (("q", q), ("k", k), ("v", v)):
            if t.dim() != 3:
                raise ValueError(f"{name}: varlen expects (total_tokens, heads, head_dim), got shape {tuple(t.shape)}")
        max_seqlen_q = _check_bound("max_seqlen_q", max_seqlen_q, capturing)
        max_seqlen_k = _check_bound("max_seqlen_k", max_seqlen_k, capturing)
        if capturing:  # the lengths stay on the device: check what the host can see
            batch_q = _check_cu_seqlens_tensor("cu_seqlens_q", cu_seqlens_q, q.device)
            batch_k = _check_cu_seqlens_tensor("cu_seqlens_k", cu_seqlens_k, q.device)
            bound_q, bound_k = max_seqlen_q, max_seqlen_k
            lens_q = lens_k = None
        else:
            lens_q = check_cu_seqlens("cu_seqlens_q", cu_seqlens_q, q.shape[0], q.device)
            lens_k = check_cu_seqlens("cu_seqlens_k", cu_seqlens_k, k.shape[0], q.device)
            batch_q, batch_k = len(lens_q), len(lens_k)
        if batch_q != batch_k:
            raise ValueError(
                f"cu_seqlens_q and cu_seqlens_k must describe the same batch, got {batch_q} and {batch_k} sequences"
            )
        if k.shape[0] != v.shape[0]:
            raise ValueError(f"k and v must hold the same tokens, got {k.shape[0]} and {v.shape[0]}")
        if lens_q is not None:
            for name, given, lens in (("max_seqlen_q", max_seqlen_q, lens_q), ("max_seqlen_k", max_seqlen_k, lens_k)):
                if given is not None and given < max(lens):
                    raise ValueError(f"{name}: must be >= the longest sequence ({max(lens)}), got {given}")
        batch = batch_q
        _, heads_q, head_dim = q.shape
        _, heads_kv, head_dim_k = k.shape
        heads_v, head_dim_v = v.shape[1], v.shape[2]
    else:
        for name, given in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
            if given is not None:
                raise ValueError(f"{name}: applies to varlen calls (with cu_seqlens) only; a batched call's "
                                 f"lengths are its tensors' seqlen dim, got {given!r}")
        for name, t in (("q", q), ("k", k), ("v", v)):
            if t.dim() != 4:
                raise ValueError(
                    f"{name}: expected (batch, seqlen, heads, head_dim), or 3-D with cu_seqlens for varlen, got shape {tuple(t.shape)}"
                )
        batch, seqlen_q, heads_q, head_dim = q.shape
        if k.shape[0] != batch or v.shape[0] != batch:
            raise ValueError(f"batch sizes differ: q {batch}, k {k.shape[0]}, v {v.shape[0]}")
        if k.shape[1] != v.shape[1]:
            raise ValueError(f"k and v must have the same seqlen, got {k.shape[1]} and {v.shape[1]}")
        heads_kv, head_dim_k = k.shape[2], k.shape[3]
        heads_v, head_dim_v = v.shape[2], v.shape[3]
        lens_q = (seqlen_q,) * batch
        lens_k = (k.shape[1],) * batch

    if head_dim_k != head_dim:
        raise ValueError(f"q and k must share head_dim, got {head_dim} and {head_dim_k}")
    if heads_v != heads_kv:
        raise ValueError(f"k and v must have the same number of heads, got {heads_kv} and {heads_v}")
    if heads_kv == 0 or heads_q % heads_kv != 0:
        raise ValueError(f"heads_q ({heads_q}) must be a multiple of heads_kv ({heads_kv}) for GQA/MQA")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.numel() and t.stride(-1) != 1:
            raise ValueError(f"{name}: the last dim (head_dim) must be contiguous (stride 1), got stride {t.stride(-1)}")
    given = {n: d for n, d in (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale))
             if d is not None}
    for name, d in given.items():
        check_descale(name, d, batch, heads_kv, q.device, check_values=False)
    shape = AttentionShape(batch, heads_q, heads_kv, head_dim, head_dim_v, lens_q, lens_k, varlen, fp8, bound_q, bound_k)
    if check_values:
        check_descale_values(shape, q_descale, k_descale, v_descale)
    return shape


def check_descale_values(
    shape: AttentionShape,
    q_descale: torch.Tensor | None = None,
    k_descale: torch.Tensor | None = None,
    v_descale: torch.Tensor | None = None,
    softmax_scale: float | None = None,
) -> None:
    """The descale values of a call `check_attention_inputs` passed: finite and > 0, and with
    `softmax_scale` (as `check_softmax_scale` returns it) the one scale FA3 folds from them
    (`check_folded_scale`), all read back in one device sync. Nothing is read while a CUDA graph
    is captured. On a failure the check that names the value raises.
    """
    if softmax_scale is not None:
        check_folded_scale(softmax_scale, check_values=False)  # softmax_scale * log2(e) alone: on the host
    given = {n: d for n, d in (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale))
             if d is not None}
    if not given or _capturing(next(iter(given.values()))):
        return
    values = torch.cat([d.reshape(-1) for d in given.values()])
    ok = (values.isfinite() & (values > 0)).all()
    if softmax_scale is not None and (q_descale is not None or k_descale is not None):
        folded = _folded_scale(_folded_base(softmax_scale), q_descale, k_descale)
        ok &= (folded.isfinite() & (folded > 0)).all()
    if not bool(ok):
        for name, d in given.items():
            check_descale(name, d, shape.batch, shape.heads_kv)
        if softmax_scale is not None:
            check_folded_scale(softmax_scale, q_descale, k_descale)


def check_flag(name: str, flag: object) -> bool:
    """A switch such as `causal`: a bool (a string such as "False" would be truthy), else TypeError."""
    if not isinstance(flag, bool):
        raise TypeError(f"{name}: expected a bool, got {type(flag).__name__} {flag!r}")
    return flag


def check_max_offset(max_offset: float) -> float:
    """FA3's max offset as a float: a number in [0, 8], so that P = exp2(s - (max - offset)) <= 2^8 < 448."""
    if (isinstance(max_offset, bool) or not isinstance(max_offset, numbers.Real) or not math.isfinite(max_offset)
            or not 0.0 <= max_offset <= 8.0):
        raise ValueError(f"max_offset: expected a number in [0, 8] (P must stay below 448), got {max_offset!r}")
    return float(max_offset)


def check_softmax_scale(softmax_scale: float | torch.Tensor | None, head_dim: int) -> float:
    """`softmax_scale` as a float, or `head_dim ** -0.5` for None; must be a real number > 0 (float32's range)."""
    if softmax_scale is None:
        if isinstance(head_dim, bool) or not isinstance(head_dim, numbers.Integral) or head_dim < 1:
            raise ValueError(f"head_dim: expected a positive int for the default softmax_scale head_dim ** -0.5, "
                             f"got {head_dim!r}")
        return head_dim ** -0.5
    if isinstance(softmax_scale, torch.Tensor) and softmax_scale.numel() == 1:
        softmax_scale = softmax_scale.item()
    real = not isinstance(softmax_scale, bool) and isinstance(softmax_scale, numbers.Real)
    try:  # math.isfinite raises OverflowError for an int beyond float's range
        finite = real and math.isfinite(softmax_scale)
    except OverflowError:
        finite = False
    if not finite:
        shown = repr(softmax_scale) if len(repr(softmax_scale)) < 40 else repr(softmax_scale)[:30] + "..."
        raise ValueError(f"softmax_scale: expected a finite number or None, got {shown}")
    if not 0 < softmax_scale <= torch.finfo(torch.float32).max or torch.tensor(float(softmax_scale)).item() == 0:
        # FA3's online softmax subtracts the row max of the scaled scores: only a positive scale keeps it the max
        raise ValueError(f"softmax_scale: expected a number > 0 that float32 holds, got {softmax_scale!r}")
    return float(softmax_scale)


def _folded_base(softmax_scale: float) -> float:
    """softmax_scale * log2(e) as the float32 the kernels are given; no tensor (this runs on every call)."""
    try:
        return struct.unpack("f", struct.pack("f", softmax_scale * _LOG2E))[0]
    except OverflowError:
        return math.inf


def _folded_scale(base: float, q_descale: torch.Tensor | None, k_descale: torch.Tensor | None) -> torch.Tensor:
    """base * q_descale * k_descale (at least one given), float32 `(batch, heads_kv)`, as the kernels multiply."""
    given = [d for d in (q_descale, k_descale) if d is not None]
    prod = given[0] if len(given) == 1 else given[0] * given[1]
    return prod * base  # base is a float32 value already: the product in float32, and no host-to-device copy


def check_folded_scale(
    softmax_scale: float,
    q_descale: torch.Tensor | None = None,
    k_descale: torch.Tensor | None = None,
    check_values: bool = True,
) -> None:
    """FA3 folds softmax_scale * log2(e) * q_descale * k_descale into one float32 per (batch, kv head); it
    must be finite and > 0 there, or every score becomes 0 or inf and the output NaN.

    `softmax_scale` as `check_softmax_scale` returns it; descales as `check_descale` accepts them.
    `check_values=False` (and a CUDA-graph capture) checks softmax_scale * log2(e) only: the
    descale values would have to be read back, a device sync.
    """
    base = _folded_base(softmax_scale)
    given = [d for d in (q_descale, k_descale) if d is not None]
    if 0 < base < math.inf:
        if not (check_values and given) or _capturing(given[0]):
            return
        folded = _folded_scale(base, q_descale, k_descale)
    else:
        folded = torch.tensor(base, dtype=torch.float32)
    bad = ~(torch.isfinite(folded) & (folded > 0))
    if bool(bad.any()):
        at = tuple(bad.nonzero()[0].tolist())  # () when only softmax_scale was checked
        parts = [f"softmax_scale {softmax_scale!r}"] + [f"{n} {d[at].item()!r}" for n, d in (
            ("q_descale", q_descale), ("k_descale", k_descale)) if d is not None and at]
        raise ValueError("softmax_scale * log2(e) * q_descale * k_descale: expected finite and > 0 in float32 (FA3 "
                         f"folds them into one scale), got {folded[at].item()}"
                         + (f" at (batch, kv head) {at}" if at else "") + f" from {', '.join(parts)}")


def sequences(shape: AttentionShape) -> Iterator[tuple[int, slice | int, slice | int]]:
    """Yield `(b, q_index, k_index)` selecting each sequence's tokens.

    Batched: `q[q_index]` is `q[b]`, shape (seqlen_q, heads, dim).
    Varlen: `q[q_index]` is the token slice of sequence b, same shape.
    """
    if not shape.varlen:
        for b in range(shape.batch):
            yield b, b, b
        return
    if not shape.lengths_on_host:
        raise ValueError("the sequence lengths of a varlen call checked under CUDA-graph capture are on the device "
                         "only; this code needs them on the host: run it eagerly")
    starts_q = [0, *torch.cumsum(torch.tensor(shape.seqlens_q), 0).tolist()]
    starts_k = [0, *torch.cumsum(torch.tensor(shape.seqlens_k), 0).tolist()]
    for b in range(shape.batch):
        yield b, slice(starts_q[b], starts_q[b + 1]), slice(starts_k[b], starts_k[b + 1])

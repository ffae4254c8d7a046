"""The one place that knows FP8: formats, value grids, ulp, bit fields, rounding.

Five 8-bit formats, written ``eXmY`` (X exponent bits, Y mantissa bits):

=========  ====  =====  ===========  =====================================
format     bias  max    inf          NaN encodings
=========  ====  =====  ===========  =====================================
e4m3fn     7     448    none         S.1111.111 (0x7F, 0xFF)
e5m2       15    57344  S.11111.00   S.11111.{01,10,11} (IEEE-like)
e4m3fnuz   8     240    none         0x80 only (no negative zero)
e5m2fnuz   16    57344  none         0x80 only (no negative zero)
e8m0fnu    127   2^127  none         0xFF; no sign, no zero, powers of two
=========  ====  =====  ===========  =====================================

(``fn`` = finite, no inf; ``uz`` = unsigned zero; ``u`` = unsigned.) The
table above is documentation; every constant the code uses is derived from the
bit-field rules in `_decode_code`.

`quantize` is a reference: it rounds in float64 with exact power-of-two
arithmetic (``frexp``/``ldexp``), never through torch's FP8 casts, so tests
can hold torch's casts against it. `cast_to_fp8` is the fast path (clamp, then
torch's cast) and agrees with `quantize` bit for bit.

Rounding (``rounding="nearest"``) is round-to-nearest, ties to even, on every
format with mantissa bits. e8m0fnu has no mantissa bits, so "even" has no
meaning there; its ties (``1.5 * 2^e``) round up to ``2^(e+1)``, which is what
torch's own e8m0fnu cast does. ``rounding="stochastic"`` rounds up with
probability equal to the distance from the lower neighbour in units of the
gap, so the result is unbiased and always one of the two neighbours.

Overflow and special inputs (``overflow=`` in `quantize` / `cast_to_fp8`):

==================================  ===========  =====================================
input                               "saturate"   "nonfinite" (as the format defines)
==================================  ===========  =====================================
NaN                                 NaN          NaN
+-inf                               +-max        +-inf (e5m2), NaN (all others)
finite, rounds beyond +-max         +-max        +-inf (e5m2), NaN (all others)
below the smallest subnormal / 2    +-0          +-0  (fnuz formats: +0, they have no -0)
e8m0fnu: 0 or below 2^-127          2^-127       2^-127 (no zero: underflow goes to min)
e8m0fnu: negative (incl. -inf)      2^-127       NaN (the format has no sign)
==================================  ===========  =====================================

torch's own float8_e8m0fnu cast (c10's ``fp8e8m0fnu_from_fp32_value``, probed
by `probe_torch_casts`) rounds the float32 mantissa to nearest with ties up,
like `quantize`, but drops the sign (-3 -> 4), maps inf and overflow to NaN,
and rounds float32 subnormals on their own bits: (0.5, 0.75] * 2^-126 goes up
to 2^-126 where the nearest value is 2^-127. `cast_to_fp8` therefore sends
e8m0fnu through `quantize`.

"Rounds beyond max" is decided after rounding with an unbounded exponent:
e4m3fn's 464 (halfway between 448 and the NaN code's 480) rounds to even 448,
while e5m2's 61440 (halfway between 57344 and 2^16) rounds to 2^16 and
overflows.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable, Literal

import torch

__all__ = [
    "FP8Format",
    "FORMATS",
    "get_format",
    "representable_values",
    "ulp",
    "encode",
    "decode",
    "quantize",
    "cast_to_fp8",
    "probe_torch_casts",
    "probe_ml_dtypes",
    "ROUNDINGS",
    "OVERFLOWS",
]

Rounding = Literal["nearest", "stochastic"]
Overflow = Literal["saturate", "nonfinite"]
ROUNDINGS: tuple[str, ...] = ("nearest", "stochastic")
OVERFLOWS: tuple[str, ...] = ("saturate", "nonfinite")

# How a format uses its top codes: "ieee" (top exponent = inf/NaN), "fn" (only
# S.1..1.1..1 is NaN), "fnuz" (0x80 is the one NaN, no -0), "e8m0" (unsigned, 0xFF NaN).
_Convention = Literal["ieee", "fn", "fnuz", "e8m0"]


@dataclass(frozen=True)
class FP8Format:
    """An 8-bit floating-point format.

    `max`, `min_normal` and `min_subnormal` are positive Python floats (exact).
    e8m0fnu has no subnormals: its `min_subnormal` equals `min_normal` (2^-127).
    `torch_dtype` is the matching torch dtype, or None when torch lacks it.
    """

    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    max: float
    min_normal: float
    min_subnormal: float
    has_inf: bool
    has_nan: bool
    torch_dtype: torch.dtype | None
    has_sign: bool = True
    has_negative_zero: bool = True
    has_zero: bool = True

    @property
    def bits(self) -> int:
        """Width of an encoding (always 8)."""
        return 1 * self.has_sign + self.exponent_bits + self.mantissa_bits

    @property
    def min_exponent(self) -> int:
        """Exponent of `min_normal` (unbiased): min_normal == 2**min_exponent."""
        return math.frexp(self.min_normal)[1] - 1

    @property
    def max_exponent(self) -> int:
        """Exponent of the binade holding `max` (unbiased)."""
        return math.frexp(self.max)[1] - 1

    @property
    def convention(self) -> str:
        """How the top codes are used: 'ieee', 'fn', 'fnuz' or 'e8m0'."""
        return _CONVENTIONS[self.name]

    def __repr__(self) -> str:
        return (
            f"FP8Format({self.name}: bias={self.bias}, max={self.max:g}, "
            f"min_normal=2^{self.min_exponent}, min_subnormal={self.min_subnormal:g}, "
            f"inf={self.has_inf}, dtype={self.torch_dtype})"
        )


def _decode_code(code: int, e_bits: int, m_bits: int, bias: int, conv: _Convention) -> float:
    """The value of one 8-bit code, from the bit-field rules alone (NaN/inf included)."""
    if conv == "e8m0":
        return math.nan if code == 0xFF else math.ldexp(1.0, code - bias)
    sign = -1.0 if code >> 7 else 1.0
    e_field = (code >> m_bits) & ((1 << e_bits) - 1)
    m_field = code & ((1 << m_bits) - 1)
    e_top = (1 << e_bits) - 1
    if conv == "fnuz" and code == 0x80:
        return math.nan
    if conv == "ieee" and e_field == e_top:
        return sign * math.inf if m_field == 0 else math.nan
    if conv == "fn" and e_field == e_top and m_field == (1 << m_bits) - 1:
        return math.nan
    if e_field == 0:  # zero and subnormals: 0.m * 2^(1 - bias)
        return sign * math.ldexp(m_field, 1 - bias - m_bits)
    return sign * math.ldexp((1 << m_bits) + m_field, e_field - bias - m_bits)


def _make(name: str, e_bits: int, m_bits: int, bias: int, conv: _Convention, dtype_name: str) -> FP8Format:
    values = [_decode_code(c, e_bits, m_bits, bias, conv) for c in range(256)]
    finite = [v for v in values if math.isfinite(v)]
    positive = sorted(v for v in finite if v > 0)
    if conv == "e8m0":
        min_normal = min_subnormal = positive[0]
    else:
        min_normal = math.ldexp(1.0, 1 - bias)
        min_subnormal = math.ldexp(1.0, 1 - bias - m_bits)
    return FP8Format(
        name=name,
        exponent_bits=e_bits,
        mantissa_bits=m_bits,
        bias=bias,
        max=max(finite),
        min_normal=min_normal,
        min_subnormal=min_subnormal,
        has_inf=any(math.isinf(v) for v in values),
        has_nan=any(math.isnan(v) for v in values),
        torch_dtype=getattr(torch, dtype_name, None),
        has_sign=conv != "e8m0",
        has_negative_zero=conv in ("ieee", "fn"),
        has_zero=conv != "e8m0",
    )


_CONVENTIONS: dict[str, _Convention] = {
    "e4m3fn": "fn",
    "e5m2": "ieee",
    "e4m3fnuz": "fnuz",
    "e5m2fnuz": "fnuz",
    "e8m0fnu": "e8m0",
}

FORMATS: dict[str, FP8Format] = {
    "e4m3fn": _make("e4m3fn", 4, 3, 7, "fn", "float8_e4m3fn"),
    "e5m2": _make("e5m2", 5, 2, 15, "ieee", "float8_e5m2"),
    "e4m3fnuz": _make("e4m3fnuz", 4, 3, 8, "fnuz", "float8_e4m3fnuz"),
    "e5m2fnuz": _make("e5m2fnuz", 5, 2, 16, "fnuz", "float8_e5m2fnuz"),
    "e8m0fnu": _make("e8m0fnu", 8, 0, 127, "e8m0", "float8_e8m0fnu"),
}

_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def get_format(fmt: str | FP8Format | torch.dtype) -> FP8Format:
    """Look up a format by name ('e4m3fn', 'float8_e4m3fn', 'torch.float8_e4m3fn'),
    by torch dtype, or pass an `FP8Format` through. Unknown formats raise ValueError."""
    if isinstance(fmt, FP8Format):
        return fmt
    if isinstance(fmt, torch.dtype):
        for f in FORMATS.values():
            if f.torch_dtype == fmt:
                return f
        raise ValueError(f"unknown FP8 format: torch dtype {fmt}; known formats: {', '.join(FORMATS)}")
    if isinstance(fmt, str):
        key = fmt.strip().lower().removeprefix("torch.").removeprefix("float8_")
        if key in FORMATS:
            return FORMATS[key]
        raise ValueError(f"unknown FP8 format {fmt!r}; known formats: {', '.join(FORMATS)}")
    raise ValueError(
        f"unknown FP8 format {fmt!r} (a {type(fmt).__name__}); expected a name, a torch float8 dtype "
        f"or an FP8Format; known formats: {', '.join(FORMATS)}"
    )


@functools.lru_cache(maxsize=None)
def _code_table(name: str) -> torch.Tensor:
    """float64 (256,): the value of every code of format `name` (NaN/inf included)."""
    f = FORMATS[name]
    conv = _CONVENTIONS[name]
    vals = [_decode_code(c, f.exponent_bits, f.mantissa_bits, f.bias, conv) for c in range(256)]
    return torch.tensor(vals, dtype=torch.float64)


def representable_values(fmt: str | FP8Format | torch.dtype) -> torch.Tensor:
    """All distinct finite values of `fmt`, strictly increasing, float64 (n,).

    +0 and -0 are one value here, so n = 256 - (#NaN codes) - (#inf codes) - (1 if -0 exists).
    """
    f = get_format(fmt)
    table = _code_table(f.name)
    finite = table[torch.isfinite(table)]
    return torch.unique(finite)  # sorted; -0 == +0 collapse to one zero


def _as_float_tensor(x: Any, what: str = "x") -> torch.Tensor:
    if isinstance(x, (float, int)) and not isinstance(x, bool):
        return torch.tensor(float(x), dtype=torch.float64)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{what}: expected a floating-point torch.Tensor or a Python float, got {type(x).__name__}")
    if x.dtype not in _FLOAT_DTYPES:
        raise TypeError(
            f"{what}: expected a floating-point tensor (float16, bfloat16, float32, float64), got {x.dtype}"
        )
    return x


def _exponent(a: torch.Tensor) -> torch.Tensor:
    """floor(log2(a)) for positive finite float64 `a`, exactly (int64)."""
    return torch.frexp(a)[1].to(torch.int64) - 1


def ulp(x: torch.Tensor | float, fmt: str | FP8Format | torch.dtype) -> torch.Tensor:
    """Gap between the grid values around |x|, float64 with x's shape.

    For |x| in [2^e, 2^(e+1)) this is 2^(e - mantissa_bits), with e clamped to
    [min_exponent, max_exponent]: below min_normal it is min_subnormal (the
    subnormal spacing), beyond max it is the top binade's spacing. At a grid
    value v < max it equals next_value(v) - v. NaN and +-inf give NaN.
    For e8m0fnu (no mantissa) ulp(2^e) = 2^e.
    """
    f = get_format(fmt)
    a = _as_float_tensor(x).double().abs()
    e = _exponent(torch.where(a > 0, a, torch.ones_like(a)))
    e = torch.where(a > 0, e, torch.full_like(e, f.min_exponent))
    e = e.clamp(f.min_exponent, f.max_exponent)
    out = torch.ldexp(torch.ones_like(a), e - f.mantissa_bits)
    return torch.where(torch.isfinite(a), out, torch.full_like(a, math.nan))


def _check_policy(rounding: str, overflow: str) -> None:
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding must be one of {ROUNDINGS}, got {rounding!r}")
    if overflow not in OVERFLOWS:
        raise ValueError(f"overflow must be one of {OVERFLOWS}, got {overflow!r}")


def _overflow_value(f: FP8Format, overflow: str) -> float:
    """Magnitude that an overflowing value takes under `overflow`."""
    if overflow == "saturate":
        return f.max
    return math.inf if f.has_inf else math.nan


def _quantize64(
    x: torch.Tensor, f: FP8Format, rounding: str, overflow: str, generator: torch.Generator | None
) -> torch.Tensor:
    """The reference rounding, float64 in and out (see `quantize`)."""
    a = x.abs()
    finite = torch.isfinite(x)
    safe = torch.where(finite & (a > 0), a, torch.ones_like(a))
    # Exponent of the grid spacing: subnormals share min_exponent's spacing;
    # the exponent is NOT clamped at the top, so values past max round to the
    # value an unbounded exponent would give and are caught as overflow below.
    e = _exponent(safe).clamp(min=f.min_exponent)
    quantum_exp = e - f.mantissa_bits
    scaled = torch.ldexp(safe, -quantum_exp)  # exact: multiply by a power of two
    if rounding == "nearest":
        if f.mantissa_bits == 0:
            # No mantissa: ties 1.5 * 2^e go up (what torch's e8m0fnu cast does).
            low = torch.floor(scaled)
            r = low + (scaled - low >= 0.5).to(torch.float64)
        else:
            r = torch.round(scaled)  # round half to even
    else:
        low = torch.floor(scaled)
        u = torch.rand(scaled.shape, generator=generator, dtype=torch.float64, device=scaled.device)
        r = low + (u < (scaled - low)).to(torch.float64)
    mag = torch.ldexp(r, quantum_exp)
    mag = torch.where(a > 0, mag, torch.zeros_like(mag))

    over = mag > f.max
    mag = torch.where(over | torch.isinf(x), torch.full_like(mag, _overflow_value(f, overflow)), mag)

    if not f.has_zero:  # e8m0fnu: unsigned, no zero
        mag = mag.clamp(min=f.min_normal)  # underflow and zero go to 2^-127 (NaN stays NaN)
        neg = x < 0
        neg_val = f.min_normal if overflow == "saturate" else math.nan
        out = torch.where(neg, torch.full_like(mag, neg_val), mag)
    else:
        out = torch.copysign(mag, x)
        if not f.has_negative_zero:
            out = out + 0.0  # -0.0 + 0.0 == +0.0: fnuz formats have no negative zero
    return torch.where(torch.isnan(x), x.to(out.dtype), out)  # NaN stays NaN, with its sign


def quantize(
    x: torch.Tensor,
    fmt: str | FP8Format | torch.dtype = "e4m3fn",
    *,
    rounding: Rounding = "nearest",
    overflow: Overflow = "saturate",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Round `x` onto `fmt`'s grid ("fake quantization"), computed exactly in float64.

    x: float16/bfloat16/float32/float64 tensor, any shape and device.
    Returns a tensor of x's dtype, shape and device whose values lie on `fmt`'s
    grid (exactly representable in x's dtype; for e8m0fnu pass float32 or wider
    since its values span 2^-127..2^127 - float16 input raises TypeError).
    rounding: "nearest" (ties to even; e8m0fnu ties up, see the module doc) or
    "stochastic" (unbiased; random numbers from `generator`, on x's device).
    overflow: "saturate" (clamp to +-max) or "nonfinite" (inf for e5m2, NaN
    for the formats without inf). NaN input always gives NaN. See the module
    docstring for every special case.
    """
    f = get_format(fmt)
    x = _as_float_tensor(x)
    _check_policy(rounding, overflow)
    if rounding == "nearest" and generator is not None:
        raise ValueError("generator is only used with rounding='stochastic'")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator: expected a torch.Generator or None, got {type(generator).__name__}")
    if not f.has_zero and x.dtype == torch.float16:
        raise TypeError(
            "e8m0fnu values span 2^-127..2^127, which float16 cannot hold; pass float32, bfloat16 or float64"
        )
    return _quantize64(x.double(), f, rounding, overflow, generator).to(x.dtype)


def encode(x: torch.Tensor | float, fmt: str | FP8Format | torch.dtype) -> torch.Tensor:
    """Bit pattern of each value of `x` in `fmt`: uint8 tensor of x's shape.

    Values must already lie on the grid (use `quantize` first); anything else
    raises ValueError. NaN encodes to the format's canonical NaN (0x7F/0xFF by
    the NaN's sign for e4m3fn and e5m2, 0x80 for fnuz, 0xFF for e8m0fnu);
    -0.0 encodes to 0x80 where -0 exists and to 0x00 in the fnuz formats.
    """
    f = get_format(fmt)
    x = _as_float_tensor(x)
    a64 = x.double()
    exact = _quantize64(a64, f, "nearest", "nonfinite", None)
    nan_in = torch.isnan(a64)
    bad = ~nan_in & ~((exact == a64) & ~torch.isnan(exact))
    if not f.has_zero:
        bad |= a64 <= 0
    if bool(bad.any()):
        first = a64[bad].flatten()[0].item()
        raise ValueError(
            f"encode: {int(bad.sum())} value(s) are not representable in {f.name} (first: {first!r}); "
            f"quantize(x, {f.name!r}) first"
        )
    a = a64.abs()
    m = f.mantissa_bits
    if not f.has_zero:
        code = (_exponent(torch.where(a > 0, a, torch.ones_like(a))) + f.bias).clamp(0, 254)
    else:
        safe = torch.where(torch.isfinite(a) & (a > 0), a, torch.ones_like(a))
        e = _exponent(safe)
        normal = a >= f.min_normal
        e_field = torch.where(normal, e + f.bias, torch.zeros_like(e))
        # significand in units of the spacing: (1.m or 0.m) * 2^m, an exact integer
        spacing_exp = torch.where(normal, e, torch.full_like(e, f.min_exponent)) - m
        sig = torch.ldexp(torch.where(a > 0, safe, torch.zeros_like(a)), -spacing_exp).to(torch.int64)
        m_field = torch.where(normal, sig - (1 << m), sig)
        code = (e_field << m) | m_field
        if f.has_inf:
            code = torch.where(torch.isinf(a), torch.full_like(code, ((1 << f.exponent_bits) - 1) << m), code)
        sign = torch.signbit(a64).to(torch.int64) << 7
        if not f.has_negative_zero:
            sign = torch.where(a > 0, sign, torch.zeros_like(sign))
        code = code | sign
    code = torch.where(nan_in, _nan_code(f, a64), code)
    return code.to(torch.uint8)


def _nan_code(f: FP8Format, x: torch.Tensor) -> torch.Tensor:
    if f.convention == "fnuz":
        return torch.full(x.shape, 0x80, dtype=torch.int64, device=x.device)
    if f.convention == "e8m0":
        return torch.full(x.shape, 0xFF, dtype=torch.int64, device=x.device)
    return torch.where(torch.signbit(x), 0xFF, 0x7F).to(torch.int64)


def decode(bits: torch.Tensor, fmt: str | FP8Format | torch.dtype) -> torch.Tensor:
    """Value of each 8-bit code: uint8 (or a float8 tensor of `fmt`'s dtype) in, float64 out.

    Computed from the bit fields, not from torch's FP8 casts.
    """
    f = get_format(fmt)
    if not isinstance(bits, torch.Tensor):
        raise TypeError(f"decode: expected a uint8 tensor, got {type(bits).__name__}")
    if f.torch_dtype is not None and bits.dtype == f.torch_dtype:
        bits = bits.view(torch.uint8)
    if bits.dtype != torch.uint8:
        raise TypeError(f"decode: expected a uint8 tensor (or {f.torch_dtype}), got {bits.dtype}")
    table = _code_table(f.name).to(bits.device)
    return table[bits.long()]


def _torch_dtype(f: FP8Format) -> torch.dtype:
    if f.torch_dtype is None:
        raise ValueError(f"this torch ({torch.__version__}) has no dtype for {f.name}")
    return f.torch_dtype


def cast_to_fp8(
    x: torch.Tensor,
    fmt: str | FP8Format | torch.dtype = "e4m3fn",
    *,
    overflow: Overflow = "saturate",
) -> torch.Tensor:
    """Round `x` to nearest-even and convert to `fmt.torch_dtype`, the same on every torch.

    x: float16/bfloat16/float32/float64 tensor, any shape and device.
    Returns a tensor of `fmt.torch_dtype`, bit-identical to `quantize(x, fmt,
    overflow=overflow)`. "saturate" clamps to +-max before torch's cast (torch
    2.13 CPU saturates e4m3fn, torch 2.11 CUDA gives NaN: the clamp makes both
    saturate). "nonfinite" writes the format's inf/NaN where x overflows.
    NaN stays NaN. float64 input and e8m0fnu go through `quantize` (torch
    double-rounds float64 -> float32 -> fp8, and its e8m0fnu cast drops signs
    and rounds float32 subnormals differently).
    """
    f = get_format(fmt)
    x = _as_float_tensor(x)
    _check_policy("nearest", overflow)
    dtype = _torch_dtype(f)
    if x.dtype == torch.float64 or not f.has_zero:
        return _quantize64(x.double(), f, "nearest", overflow, None).float().to(dtype)
    y = x.clamp(-f.max, f.max).to(dtype)
    if overflow == "nonfinite":
        over = _overflows(x, f)
        if bool(over.any()):
            special = torch.tensor(_overflow_value(f, "nonfinite"), dtype=torch.float32, device=x.device)
            fill = torch.copysign(special, x.float()).to(dtype)
            y = _where_fp8(over, fill, y)
    return y


def _where_fp8(mask: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """torch.where on fp8 tensors via their bytes (works on every torch version/device)."""
    return torch.where(mask, a.view(torch.uint8), b.view(torch.uint8)).view(a.dtype)


def _overflows(x: torch.Tensor, f: FP8Format) -> torch.Tensor:
    """True where round-to-nearest-even of x exceeds +-max (inf included, NaN excluded)."""
    a = x.double().abs()
    half_gap = float(ulp(f.max, f)) / 2
    # At the exact halfway point above max, ties-to-even overflows iff max's code
    # is odd; e8m0fnu's ties always go up.
    max_is_odd = int(encode(torch.tensor(f.max, dtype=torch.float64), f)) & 1
    tie_overflows = bool(max_is_odd) or f.mantissa_bits == 0
    boundary = f.max + half_gap
    return (a > boundary) | ((a == boundary) & tie_overflows)


def _fmt_value(v: float) -> float | str:
    """JSON-friendly float: NaN/inf become strings."""
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def _probe_cases(f: FP8Format) -> list[tuple[str, str, float]]:
    """(kind, description, input) boundary cases for one format; inputs exact in float32."""
    top_gap = float(ulp(f.max, f))
    mx, s = f.max, f.min_subnormal
    one_gap = float(ulp(1.0, f))
    cases: list[tuple[str, str, float]] = [
        ("in_range", "max", mx),
        ("in_range", "max + gap/4", mx + top_gap / 4),
        ("in_range", "1 + gap/2 (tie)", 1 + one_gap / 2),
        ("in_range", "1 + 3 gap/2" + (" (tie)" if f.mantissa_bits else ""), 1 + 3 * one_gap / 2),  # e8m0: 2.5
        ("in_range", "0.49", 0.49),
        ("in_range", "0.123", 0.123),
    ]
    if f.has_zero:
        cases += [
            ("in_range", "-max", -mx),
            ("in_range", "-(1 + gap/2) (tie)", -(1 + one_gap / 2)),
            ("in_range", "min_normal", f.min_normal),
            ("in_range", "min_subnormal", s),
            ("in_range", "min_subnormal * 3/2 (tie)", 1.5 * s),
            ("in_range", "min_subnormal * 3/4", 0.75 * s),
            ("in_range", "min_subnormal / 2 (tie with 0)", 0.5 * s),
            ("in_range", "-min_subnormal / 2 (tie with 0)", -0.5 * s),
            ("in_range", "-0.0", -0.0),
        ]
    else:
        cases += [
            ("in_range", "2^-127 (min)", f.min_normal),
            ("in_range", "3 * 2^-126 (tie)", 3 * 2.0**-126),
            ("underflow", "0.0", 0.0),
            ("float32_subnormal", "1.25 * 2^-127", 1.25 * 2.0**-127),
            ("negative", "-1.0", -1.0),
            ("negative", "-3.0", -3.0),
        ]
    over = [
        ("max + gap/2 (tie)", mx + top_gap / 2),
        ("max + 3 gap/4", mx + 3 * top_gap / 4),
        ("2 * max", 2 * mx),
        ("-2 * max", -2 * mx),
    ]
    for big in (500.0, 1e6):
        if big > mx + top_gap / 2:
            over.append((f"{big:g}", big))
    cases += [("overflow", d, v) for d, v in over if abs(v) < 3.4e38 and bool(_overflows(torch.tensor(v), f))]
    cases += [
        ("infinity", "inf", math.inf),
        ("infinity", "-inf", -math.inf),
        ("nan", "nan", math.nan),
    ]
    return cases


def _classify(torch_vals: list[float], refs: dict[str, list[float]]) -> list[str]:
    """Which quantize policies reproduce `torch_vals` exactly (NaN == NaN, -0 != +0)."""

    def same(a: float, b: float) -> bool:
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)

    return [p for p, ref in refs.items() if all(same(t, r) for t, r in zip(torch_vals, ref))]


def _describe(torch_vals: list[float], f: FP8Format) -> str:
    """'saturates' / 'NaN' / 'inf' / 'mixed' for torch's outputs on overflowing inputs."""
    if all(math.isnan(v) for v in torch_vals):
        return "NaN"
    if all(math.isinf(v) for v in torch_vals):
        return "inf"
    if all(abs(v) == f.max for v in torch_vals):
        return "saturates"
    return "mixed"


def _probe(cast: Callable[[FP8Format, torch.Tensor], torch.Tensor]) -> tuple[dict[str, Any], list[dict]]:
    """Run `cast` (float32 (n,) -> uint8 codes (n,)) on every format's boundary cases."""
    formats: dict[str, Any] = {}
    rows: list[dict] = []
    for name, f in FORMATS.items():
        info: dict[str, Any] = {}
        formats[name] = info
        cases = _probe_cases(f)
        x = torch.tensor([v for _, _, v in cases], dtype=torch.float32)
        try:
            codes = cast(f, x)
        except (RuntimeError, TypeError, ValueError, AttributeError) as exc:  # no such dtype / not castable here
            info.update(supported=False, error=(str(exc).splitlines() or [type(exc).__name__])[0])
            continue
        info["supported"] = True
        got = decode(codes, f).tolist()
        refs = {p: _quantize64(x.double(), f, "nearest", p, None).tolist() for p in OVERFLOWS}
        matches: dict[str, list[str]] = {}
        for kind in dict.fromkeys(k for k, _, _ in cases):
            idx = [i for i, c in enumerate(cases) if c[0] == kind]
            matches[kind] = _classify([got[i] for i in idx], {p: [r[i] for i in idx] for p, r in refs.items()})
            if kind in ("overflow", "infinity", "nan"):
                info[kind] = _describe([got[i] for i in idx], f)
        info["rounding"] = "nearest" if matches["in_range"] else "differs"
        info["matches"] = matches
        for (kind, desc, v), t, s, n in zip(cases, got, refs["saturate"], refs["nonfinite"]):
            rows.append(
                dict(format=name, kind=kind, case=desc, input=_fmt_value(v), cast=_fmt_value(t),
                     saturate=_fmt_value(s), nonfinite=_fmt_value(n))
            )
    return formats, rows


def probe_torch_casts(device: str | torch.device = "cpu") -> dict[str, Any]:
    """What this torch's own `x.to(float8_dtype)` does at the boundaries, measured now.

    Casts float32 boundary inputs (max, ties, halfway above max, 500, 1e6,
    +-inf, NaN, subnormal ties, ...) on `device` and compares each result with
    `quantize` under both overflow policies. Returns a JSON-serializable dict:

      library, torch, device: "torch", its version, the device string
      formats: {name: {dtype, supported, overflow, infinity, nan, rounding, matches,
                       float64_double_rounding}}
        overflow / infinity / nan: what torch gave there: 'saturates', 'NaN', 'inf' or 'mixed'
        rounding: 'nearest' if all in-range cases (ties, subnormals) match quantize, else 'differs'
        matches: {kind: [policies]} - the quantize overflow policies that reproduce
                 torch on every case of that kind ('in_range', 'overflow', 'infinity', 'nan',
                 and for e8m0fnu 'underflow', 'negative', 'float32_subnormal')
        float64_double_rounding: True if a float64 input is rounded twice (via float32)
      rows: one dict per case: format, kind, case, input, cast (torch's result), saturate, nonfinite
    A dtype missing from torch or not castable on the device has supported=False and an error.
    """
    device = torch.device(device)

    def cast(f: FP8Format, x: torch.Tensor) -> torch.Tensor:
        return x.to(device).to(_torch_dtype(f)).cpu().view(torch.uint8)

    formats, rows = _probe(cast)
    for name, info in formats.items():
        f = FORMATS[name]
        info["dtype"] = str(f.torch_dtype) if f.torch_dtype is not None else None
        if info["supported"] and f.has_zero:  # 1 + gap/2 + 2^-40: float32 rounds it onto the tie
            x64 = torch.tensor([1 + float(ulp(1.0, f)) / 2 + 2.0**-40], dtype=torch.float64)
            direct = decode(x64.to(device).to(f.torch_dtype).cpu().view(torch.uint8), f).item()
            info["float64_double_rounding"] = direct != _quantize64(x64, f, "nearest", "saturate", None).item()
    return {"library": "torch", "torch": torch.__version__, "device": str(device), "formats": formats, "rows": rows}


def probe_ml_dtypes() -> dict[str, Any] | None:
    """The same boundary probe for ml_dtypes (JAX's FP8 types), or None when it is not installed.

    Same layout as `probe_torch_casts` ("library": "ml_dtypes", "version"); ml_dtypes
    is optional and not a dependency of fp8lab.
    """
    try:
        import ml_dtypes
        import numpy as np
    except ImportError:
        return None

    def cast(f: FP8Format, x: torch.Tensor) -> torch.Tensor:
        dtype = getattr(ml_dtypes, f"float8_{f.name}")
        codes = np.asarray(x.numpy()).astype(dtype).view(np.uint8)
        return torch.from_numpy(codes.copy())

    formats, rows = _probe(cast)
    return {"library": "ml_dtypes", "version": ml_dtypes.__version__, "formats": formats, "rows": rows}

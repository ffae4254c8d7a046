"""Round float32 to the e4m3fn grid inside a Triton kernel, exactly, without an FP8 cast.

Why this exists: Triton 3.9's interpreter (``TRITON_INTERPRET=1``, how CI runs our
kernels on a CPU) converts float32 -> float8e4nv wrongly whenever rounding
carries into the exponent (0.49 -> 0.25, 500 -> 256). A kernel that must be
exact under the interpreter therefore rounds in float32 first; the cast that
follows sees a value already on the grid and is exact everywhere.

On the GPU the hardware conversion (``cvt.rn.satfinite.e4m3x2.f32``) already
rounds to nearest-even and saturates, so kernels call this only when asked
(the ``ROUND_IN_FP32`` switch); the GPU benchmark checks both paths agree bit
for bit.

The trick, for ``|x| <= 448`` (callers clamp first):
- normal range ``|x| >= 2^-6``: e4m3 keeps 3 of float32's 23 mantissa bits.
  Add ``0x7FFFF`` plus the lowest kept bit to the bit pattern, then clear the
  20 dropped bits: round-to-nearest, ties to even, and a carry out of the
  mantissa bumps the exponent exactly as it should.
- subnormal range ``|x| < 2^-6``: the grid is the multiples of ``2^-9``.
  ``|x| * 512`` is exact (a power of two) and below 8; adding and subtracting
  ``1.5 * 2^23`` rounds it to an integer with float32's own nearest-even
  rounding (every float32 above 2^23 is an integer).
- the sign bit is copied back from ``x`` so ``-0.0`` and tiny negatives keep
  ``0x80``, as a hardware cast gives.

The same interpreter truncates float32 -> bfloat16 (round toward zero: half of
all values land one bf16 ulp low, measured on Triton 3.9), so `round_to_bf16`
does nearest-even in the bit pattern before that cast too.

`TINY_DESCALE`: the GPU kernels divide by a descale d as x * RN(1/d) plus Markstein's FMA
correction, which is exact only while its residual does not underflow: for every d >= 2^-92
wherever the quotient matters to e4m3 (>= 2^-11). Below 2^-90 (an amax under ~3.6e-25; 1/d
itself overflows from 2^-128) they divide exactly another way: IEEE division (`div_rn`), for
every value of a tile or part whose descale is that small (a uniform branch).
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["TINY_DESCALE", "round_to_bf16", "round_to_e4m3"]

TINY_DESCALE = tl.constexpr(2.0 ** -90)


@triton.jit
def round_to_e4m3(x):
    """float32 block, ``|x| <= 448`` -> float32 block on the e4m3fn grid (RNE)."""
    a = tl.abs(x)
    bits = a.to(tl.int32, bitcast=True)
    lsb = (bits >> 20) & 1  # lowest of the 3 mantissa bits e4m3 keeps
    normal = ((bits + 0x7FFFF + lsb) & -0x100000).to(tl.float32, bitcast=True)  # -0x100000 == 0xFFF00000
    magic = 12582912.0  # 1.5 * 2^23: adding it rounds anything below 2^22 to an integer
    subnormal = ((a * 512.0 + magic) - magic) * 0.001953125  # 512 = 2^9; 0.001953125 = 2^-9
    r = tl.where(a >= 0.015625, normal, subnormal)  # 0.015625 = 2^-6, e4m3's smallest normal
    sign = x.to(tl.int32, bitcast=True) & -2147483648  # the float32 sign bit, 0x80000000
    return (r.to(tl.int32, bitcast=True) | sign).to(tl.float32, bitcast=True)


@triton.jit
def round_to_bf16(x):
    """Finite float32 block -> float32 block on the bfloat16 grid (nearest, ties to even)."""
    bits = x.to(tl.int32, bitcast=True)
    lsb = (bits >> 16) & 1  # lowest of the 7 mantissa bits bfloat16 keeps
    return ((bits + 0x7FFF + lsb) & -0x10000).to(tl.float32, bitcast=True)  # -0x10000 == 0xFFFF0000

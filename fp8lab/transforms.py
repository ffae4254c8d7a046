"""Transforms that change FP8 error but not the attention result (in exact arithmetic).

Incoherent processing (FA3 paper, Sec. 3.3): rotate Q and K along the head dim by
the same orthogonal matrix `M = diag(signs) @ H / sqrt(d)`, random ±1 signs times
a Hadamard matrix. `(q M)(k M)^T = q M M^T k^T = q k^T`, while an outlier in
one channel is spread over all `d` channels, so per-tensor amax shrinks and
FP8 loses less precision.

Hadamard matrices here exist for every head dim FA3 supports (64, 96, 128, 192, 256):

* `d = 2^k`: Sylvester's construction `H_{2n} = [[H, H], [H, -H]]`;
* `d = 2^k * (p + 1)` with `p` prime, `p ≡ 3 (mod 4)`: Paley's construction I of
  order `p + 1`, Kronecker with a Sylvester matrix (96 = 12 x 8, 192 = 12 x 16,
  with Paley's order 12 from p = 11).

So 96 and 192 get a full Hadamard that mixes every channel, not a
block-diagonal stand-in. `block_size=` still gives the block-diagonal variant
(what a fused kernel often uses: a 32/64/128 fast Walsh-Hadamard per block).

K smoothing (SageAttention): subtract each channel's mean over the keys,
`k' = k - mean`. Each score row changes by the constant `q . mean`, and the
softmax of a row does not change when a constant is added to it, so the
output is unchanged (the logsumexp shifts by `softmax_scale * q . mean`).
This holds for causal and varlen masks too, since the shift is per row.
"""

from __future__ import annotations

import functools
import itertools
import math

import torch

from fp8lab.layout import check_count, check_cu_seqlens

__all__ = [
    "FA3_HEAD_DIMS",
    "hadamard_matrix",
    "incoherence_matrix",
    "incoherent_processing",
    "rotate",
    "smooth_k",
]

FA3_HEAD_DIMS: tuple[int, ...] = (64, 96, 128, 192, 256)


def _is_prime(n: int) -> bool:
    return n >= 2 and all(n % p for p in range(2, math.isqrt(n) + 1))


def _paley_order(n: int) -> int | None:
    """Largest-odd-part Paley factor m = p + 1 (p prime, p % 4 == 3) with n = m * 2^j, or None."""
    m = n
    while m % 2 == 0:
        m //= 2
    while m <= n:
        if m % 4 == 0 and _is_prime(m - 1) and (m - 1) % 4 == 3 and m & (m - 1):  # not a power of two
            return m
        m *= 2
    return None


def _paley(order: int) -> torch.Tensor:
    """Paley construction I: Hadamard matrix of order p + 1, p prime ≡ 3 mod 4 (int64 ±1)."""
    p = order - 1
    residues = {(i * i) % p for i in range(1, p)}
    chi = torch.tensor([0] + [1 if a in residues else -1 for a in range(1, p)], dtype=torch.int64)
    idx = torch.arange(p)
    jacobsthal = chi[(idx[None, :] - idx[:, None]) % p]  # Q[i, j] = chi(j - i), antisymmetric
    s = torch.zeros(order, order, dtype=torch.int64)
    s[0, 1:] = 1
    s[1:, 0] = -1
    s[1:, 1:] = jacobsthal
    return s + torch.eye(order, dtype=torch.int64)


def _sylvester(n: int) -> torch.Tensor:
    h = torch.ones(1, 1, dtype=torch.int64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


@functools.lru_cache(maxsize=None)
def _hadamard_int(n: int) -> torch.Tensor:
    if n >= 1 and n & (n - 1) == 0:
        return _sylvester(n)
    m = _paley_order(n)
    if m is None:
        raise ValueError(
            f"no Hadamard matrix of order {n} from Sylvester (2^k) or Paley I (2^k * (p+1), p prime ≡ 3 mod 4); "
            f"use block_size= with a power of two dividing {n}"
        )
    return torch.kron(_paley(m), _sylvester(n // m))


def hadamard_matrix(n: int, *, normalized: bool = True, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """An `(n, n)` Hadamard matrix: entries ±1 with `H H^T = n I`; divided by sqrt(n) if `normalized` (orthogonal)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    h = _hadamard_int(n).to(dtype)
    return h / math.sqrt(n) if normalized else h


def incoherence_matrix(
    head_dim: int,
    *,
    seed: int = 0,
    generator: torch.Generator | None = None,
    block_size: int | None = None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Orthogonal `(head_dim, head_dim)` matrix `diag(random ±1) @ H`, H a normalized Hadamard.

    block_size: None = one Hadamard of order head_dim; otherwise block-diagonal Hadamards of that order.
    The signs come from `generator`, or a CPU generator seeded with `seed`.
    """
    head_dim = check_count("head_dim", head_dim, 1)
    b = head_dim if block_size is None else block_size
    if not isinstance(b, int) or b < 1 or head_dim % b:
        raise ValueError(f"block_size must divide head_dim={head_dim}, got {block_size!r}")
    gen = generator if generator is not None else torch.Generator().manual_seed(seed)
    signs = torch.randint(0, 2, (head_dim,), generator=gen, device=gen.device).double() * 2 - 1
    h = torch.block_diag(*[hadamard_matrix(b)] * (head_dim // b))
    return (signs.cpu()[:, None] * h).to(dtype=dtype, device=device)


def rotate(x: torch.Tensor, matrix: torch.Tensor) -> torch.Tensor:
    """`x @ matrix` along the last dim (head_dim), in float64, returned in x's dtype."""
    for name, t in (("x", x), ("matrix", matrix)):
        if not isinstance(t, torch.Tensor) or not t.dtype.is_floating_point:
            got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
            raise TypeError(f"{name}: expected a floating-point torch.Tensor, got {got}")
    d = x.shape[-1]
    if matrix.shape != (d, d):
        raise ValueError(f"matrix: expected ({d}, {d}) for head_dim {d}, got {tuple(matrix.shape)}")
    return (x.double() @ matrix.to(device=x.device, dtype=torch.float64)).to(x.dtype)


def incoherent_processing(
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    matrix: torch.Tensor | None = None,
    seed: int = 0,
    block_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rotate q and k by one random-sign Hadamard matrix; returns `(q M, k M, M)`.

    q: (..., head_dim), k: (..., head_dim), any FA3 layout; results in their dtypes.
    `q M (k M)^T == q k^T` in exact arithmetic (tested in float64).
    """
    for name, t in (("q", q), ("k", k)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share head_dim, got {q.shape[-1]} and {k.shape[-1]}")
    m = matrix if matrix is not None else incoherence_matrix(q.shape[-1], seed=seed, block_size=block_size)
    return rotate(q, m), rotate(k, m), m


def smooth_k(k: torch.Tensor, *, cu_seqlens: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Subtract each channel's mean over the keys of each sequence; returns `(k - mean, mean)`.

    k: batched (batch, seqlen_k, heads_kv, head_dim) -> mean (batch, 1, heads_kv, head_dim);
    varlen (total_k, heads_kv, head_dim) with int32 cu_seqlens (batch + 1,) -> mean (batch, heads_kv, head_dim)
    (without cu_seqlens, one mean over all tokens: still exact, since any per-row shift is).
    Computed in float64, returned in k's dtype.
    """
    if not isinstance(k, torch.Tensor):
        raise TypeError(f"k: expected a torch.Tensor, got {type(k).__name__}")
    if k.dim() == 4:
        if cu_seqlens is not None:
            raise ValueError(f"cu_seqlens: a batched k {tuple(k.shape)} has its sequences on dim 0; cu_seqlens goes "
                             "with a varlen k (total, heads, head_dim), got both")
        if k.shape[1] == 0:  # no keys: nothing to subtract (as for an empty varlen sequence), not a NaN mean
            return k.clone(), torch.zeros((k.shape[0], 1, *k.shape[2:]), dtype=k.dtype, device=k.device)
        mean = k.double().mean(dim=1, keepdim=True)
        return (k.double() - mean).to(k.dtype), mean.to(k.dtype)
    if k.dim() != 3:
        raise ValueError(f"k: expected (batch, seqlen, heads, head_dim) or (total, heads, head_dim), got {tuple(k.shape)}")
    if cu_seqlens is None:
        bounds = [0, k.shape[0]]
    else:
        lengths = check_cu_seqlens("cu_seqlens", cu_seqlens, k.shape[0], k.device)
        bounds = [0, *itertools.accumulate(lengths)]
    k64 = k.double()
    out = torch.empty_like(k64)
    means = []
    for a, b in zip(bounds, bounds[1:]):
        mean = k64[a:b].mean(dim=0) if b > a else torch.zeros_like(k64[0])
        out[a:b] = k64[a:b] - mean
        means.append(mean)
    return out.to(k.dtype), torch.stack(means).to(k.dtype)

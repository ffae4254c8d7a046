"""Which keys a query sees: FlashAttention's causal and sliding-window masks.

Query ``i`` of a sequence with ``seqlen_q`` queries and ``seqlen_k`` keys sees
key ``j`` when

    i + seqlen_k - seqlen_q - left  <=  j  <=  i + seqlen_k - seqlen_q + right

with ``left = -1`` / ``right = -1`` meaning unbounded on that side. Causal is
``right = 0`` (the mask is aligned bottom-right, as FlashAttention does).
"""

from __future__ import annotations

import torch

__all__ = ["key_range", "normalize_window", "visible"]


def normalize_window(causal: bool, window_size: tuple[int, int] | list[int] | None) -> tuple[int, int]:
    """Validate `window_size` and fold `causal` into it: returns `(left, right)`, -1 = unbounded.

    Raises ValueError for anything but two ints >= -1, and TypeError for a non-bool `causal`.
    """
    if not isinstance(causal, bool):
        raise TypeError(f"causal: expected a bool, got {type(causal).__name__}")
    if window_size is None:
        window_size = (-1, -1)
    if (
        not isinstance(window_size, (tuple, list))
        or len(window_size) != 2
        or not all(isinstance(w, int) and not isinstance(w, bool) for w in window_size)
    ):
        raise ValueError(f"window_size: expected (left, right), two ints >= -1, got {window_size!r}")
    left, right = window_size
    if left < -1 or right < -1:
        raise ValueError(f"window_size: entries must be >= -1 (-1 = unbounded), got {(left, right)}")
    if causal:
        right = 0
    return left, right


def visible(
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    seqlen_q: int,
    seqlen_k: int,
    left: int,
    right: int,
) -> torch.Tensor:
    """Bool mask `(len(q_pos), len(k_pos))`: True where query position q_pos[r] sees key k_pos[c].

    q_pos, k_pos: int64 positions within one sequence (0-based).
    """
    diag = (q_pos + (seqlen_k - seqlen_q))[:, None]
    k = k_pos[None, :]
    ok = k < seqlen_k
    if right >= 0:
        ok = ok & (k <= diag + right)
    if left >= 0:
        ok = ok & (k >= diag - left)
    return ok


def key_range(q_lo: int, q_hi: int, seqlen_q: int, seqlen_k: int, left: int, right: int) -> tuple[int, int]:
    """Keys `[lo, hi)` that any query in positions `[q_lo, q_hi)` may see (a superset is fine)."""
    shift = seqlen_k - seqlen_q
    hi = seqlen_k if right < 0 else min(seqlen_k, q_hi - 1 + shift + right + 1)
    lo = 0 if left < 0 else max(0, q_lo + shift - left)
    return lo, max(lo, hi)

"""Checkpoint attention scales resolved the way vLLM resolves them.

vLLM (`vllm/model_executor/layers/quantization/kv_cache.py`,
`BaseKVCacheMethod.process_weights_after_loading`) loads optional per-tensor
`q_scale`, `k_scale`, `v_scale` (a single `kv_scale` is loaded into `k_scale`)
and `prob_scale`, all *descales* (`x ~= x_fp8 * scale`), and then:

1. k and v both missing -> 1.0 each (with a warning);
2. a single kv_scale -> used for both k and v;
3. q missing -> falls back to k_scale ("Checkpoint does not provide a q
   scaling factor. Setting it to k_scale. This only matters for FP8 Attention
   backends"), the TensorRT-LLM convention;
4. a later block of the same function sets `q_scale = 1.0` whenever the
   checkpoint had none and copies it over the fallback of step 3 (vLLM PRs
   #38975 and #51534), so the fallback never survives.

`resolve_checkpoint_scales(..., emulate="intended")` does 1-3;
`emulate="vllm"` also does 4, so notebooks and tests can show what it costs.
vLLM marks a missing scale with the sentinel -1.0; here a missing scale is
absent or None, and a scale <= 0 is an error.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import torch

from fp8lab.scaling.fa3 import descale_from_scalar

__all__ = ["ScaleFallbackWarning", "ResolvedScales", "resolve_checkpoint_scales", "CHECKPOINT_SCALE_NAMES"]

CHECKPOINT_SCALE_NAMES = ("q_scale", "k_scale", "v_scale", "kv_scale", "prob_scale")


class ScaleFallbackWarning(UserWarning):
    """A checkpoint scale was missing and a fallback was used."""


@dataclass(frozen=True)
class ResolvedScales:
    """Final per-tensor descales and where each came from.

    sources maps "q", "k", "v", "prob" to a short provenance, e.g. "k_scale (q fallback)".
    """

    q: float
    k: float
    v: float
    prob: float
    sources: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    emulate: str = "intended"

    def fa3_descales(self, batch: int, heads_kv: int, *, device: torch.device | str | None = None) -> dict[str, torch.Tensor]:
        """`q_descale`, `k_descale`, `v_descale` as vLLM passes them to FA3: scalars expanded to (batch, heads_kv)."""
        return {
            f"{n}_descale": descale_from_scalar(getattr(self, n), batch, heads_kv, device=device, name=f"{n}_descale")
            for n in ("q", "k", "v")
        }


def _scalar(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{name}: only per-tensor (one number) checkpoint scales are supported, got shape {tuple(value.shape)}")
        value = value.item()
    if isinstance(value, bool):  # float(True) is 1.0: a flag, not a scale
        raise TypeError(f"{name}: expected a number or a one-element tensor, got bool {value!r}")
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected a number or a one-element tensor, got {type(value).__name__}") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name}: a scale must be finite and > 0, got {v} (leave it out if the checkpoint has none)")
    return v


def resolve_checkpoint_scales(
    scales: Mapping[str, object],
    *,
    emulate: Literal["intended", "vllm"] = "intended",
    warn: bool = True,
) -> ResolvedScales:
    """Resolve optional checkpoint scales into final q/k/v/prob descales with provenance.

    scales: any of q_scale, k_scale, v_scale, kv_scale, prob_scale (floats or one-element tensors).
    emulate: "intended" keeps the q -> k_scale fallback; "vllm" reproduces vLLM's later
        overwrite of that fallback with 1.0.
    Each fallback issues a `ScaleFallbackWarning` (unless warn=False) and is listed in `.warnings`.
    """
    if emulate not in ("intended", "vllm"):
        raise ValueError(f"emulate must be 'intended' or 'vllm', got {emulate!r}")
    if not isinstance(scales, Mapping):  # a str would be read letter by letter as scale names
        raise TypeError(f"scales: expected a dict of checkpoint scales such as {{'k_scale': 0.02, 'v_scale': 0.01}}, "
                        f"got {type(scales).__name__} {scales!r}")
    unknown = sorted(set(scales) - set(CHECKPOINT_SCALE_NAMES))
    if unknown:
        raise ValueError(f"unknown checkpoint scale(s) {unknown}; expected some of {list(CHECKPOINT_SCALE_NAMES)}")
    got = {n: _scalar(n, scales.get(n)) for n in CHECKPOINT_SCALE_NAMES}
    notes: list[str] = []
    src: dict[str, str] = {}

    q, k, v, kv, prob = (got[n] for n in CHECKPOINT_SCALE_NAMES)
    if kv is not None and (k is not None or v is not None):
        raise ValueError("kv_scale together with k_scale/v_scale is ambiguous; give either kv_scale or k_scale and v_scale")
    if kv is not None:
        k = v = kv
        src["k"] = src["v"] = "kv_scale"
    elif k is not None and v is not None:
        src["k"], src["v"] = "k_scale", "v_scale"
    elif k is None and v is None:
        k = v = 1.0
        src["k"] = src["v"] = "default 1.0"
        notes.append("Checkpoint has no k/v scales: using 1.0 for both, which may cost accuracy with an fp8 KV cache.")
    elif emulate == "vllm" and k is not None:
        # vLLM loads a kv_scale into k_scale, so a lone k_scale looks like one and is duplicated.
        v = k
        src["k"], src["v"] = "k_scale", "k_scale (vLLM duplicates a lone k_scale)"
        notes.append("Checkpoint has k_scale but no v_scale: vLLM uses k_scale for v too.")
    else:
        present = "k_scale" if k is not None else "v_scale"
        raise ValueError(f"checkpoint has {present} but not the other; give both k_scale and v_scale, or one kv_scale")

    if q is not None:
        src["q"] = "q_scale"
    elif emulate == "intended":
        q = k
        src["q"] = f"k_scale fallback ({src['k']})"
        notes.append("Checkpoint has no q_scale: using k_scale (TRT-LLM convention). This only matters for FP8 attention.")
    else:
        q = 1.0
        src["q"] = "default 1.0 (vLLM overwrites the k_scale fallback)"
        notes.append(
            "Checkpoint has no q_scale: vLLM first falls back to k_scale, then overwrites it with 1.0 "
            "(vLLM PRs #38975, #51534)."
        )

    if prob is not None:
        src["prob"] = "prob_scale"
    else:
        prob = 1.0
        src["prob"] = "default 1.0"
        notes.append("Checkpoint has no prob_scale: using 1.0 (FA3 does not use it; it keeps P in [0, 256]).")

    if warn:
        for n in notes:
            warnings.warn(n, ScaleFallbackWarning, stacklevel=2)
    return ResolvedScales(q=q, k=k, v=v, prob=prob, sources=src, warnings=tuple(notes), emulate=emulate)

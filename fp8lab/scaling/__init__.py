"""Scale strategies, FA3 descales and checkpoint scales.

    x_fp8, descale = quantize(x, ScaleStrategy(PerHead(heads_kv=2)))
    x_back = dequantize(x_fp8, descale, PerHead(heads_kv=2))

Submodules: `granularity` (which elements share a scale), `strategy` (amax
sources, options, quantize/dequantize), `calibration` (static amax by max,
percentile, MSE), `fa3` (descales in FA3's (batch, heads_kv) layout),
`checkpoint` (q/k/v/prob scales resolved the way vLLM does).
Descale convention: `x ~= x_fp8.float() * descale`, `descale = amax / fp8_max`.
"""

from fp8lab.scaling.calibration import DEFAULT_MSE_RATIOS, calibrate, calibration_mse, row_percentile
from fp8lab.scaling.checkpoint import (
    CHECKPOINT_SCALE_NAMES,
    ResolvedScales,
    ScaleFallbackWarning,
    resolve_checkpoint_scales,
)
from fp8lab.scaling.fa3 import (
    as_contiguous_reads,
    as_kernel_reads,
    descale_from_heads,
    descale_from_scalar,
    descale_from_tokens,
    group_max,
    quantize_for_fa3,
)
from fp8lab.scaling.granularity import Granularity, PerBlock, PerChannel, PerHead, PerTensor, PerToken
from fp8lab.scaling.strategy import (
    CurrentAmax,
    DelayedAmax,
    ScaleStrategy,
    StaticAmax,
    check_finite,
    compute_amax,
    dequantize,
    descale_from_amax,
    fake_quantize,
    quantize,
    quantize_with_descale,
)

__all__ = [
    "CHECKPOINT_SCALE_NAMES",
    "DEFAULT_MSE_RATIOS",
    "CurrentAmax",
    "DelayedAmax",
    "Granularity",
    "PerBlock",
    "PerChannel",
    "PerHead",
    "PerTensor",
    "PerToken",
    "ResolvedScales",
    "ScaleFallbackWarning",
    "ScaleStrategy",
    "StaticAmax",
    "calibrate",
    "calibration_mse",
    "check_finite",
    "compute_amax",
    "dequantize",
    "descale_from_amax",
    "descale_from_heads",
    "descale_from_scalar",
    "as_contiguous_reads",
    "as_kernel_reads",
    "descale_from_tokens",
    "fake_quantize",
    "group_max",
    "quantize",
    "quantize_for_fa3",
    "quantize_with_descale",
    "resolve_checkpoint_scales",
    "row_percentile",
]

"""Our Triton kernels: FP8 flash attention (FA3's algorithm) and fused FP8 quantization.

Both run on Hopper GPUs and, exactly, on the CPU under ``TRITON_INTERPRET=1``.
"""

from fp8lab.kernels.attention import (
    AttentionConfig,
    attention_configs,
    default_config,
    fp8_attention,
    pretranspose_v,
    tune_attention,
    v_layout_of,
)
from fp8lab.kernels.quantize import E4M3_MAX, quantize_fp8, quantize_fp8_static

__all__ = [
    "AttentionConfig",
    "E4M3_MAX",
    "attention_configs",
    "default_config",
    "fp8_attention",
    "pretranspose_v",
    "quantize_fp8",
    "quantize_fp8_static",
    "tune_attention",
    "v_layout_of",
]

"""Our Triton kernels: FP8 flash attention (FA3's algorithm) and fused FP8 quantization.

Both run on Hopper GPUs and, exactly, on the CPU under ``TRITON_INTERPRET=1``.
`fp8_attention_ws` is FA3's warp-specialized schedule written in Gluon (Hopper only, batched,
V pre-transposed, fastest with `key_ordered_vt(v)`, or as stored with `WsConfig(transpose_v=True)`);
`compile_ws_sm90` shows its sm_90 code
without a GPU. `quantize_fp8` per kv head and per tensor runs `quantize_onchip` (Gluon) on Hopper
for inputs of 4 MiB or more where it can: each slice held in the SMs' shared memory, x read once.
`quantize_fp8_delayed` / `quantize_delayed` are delayed scaling (the descale from earlier calls) in
one pass, which needs no slice on chip. Both attention kernels take `pv_flush=True`: each key
block's P V added to O in fp32 (vLLM's two-level accumulation) instead of in the FP8 MMA's 13-bit
accumulator across the whole context (upstream FA3's), with tiles chosen for it (`gpu_config`).
"""

from fp8lab.kernels.attention import (
    AttentionConfig,
    attention_configs,
    default_config,
    fp8_attention,
    gpu_config,
    pretranspose_v,
    tune_attention,
    v_layout_of,
)
from fp8lab.kernels.attention_ws import WsConfig, compile_ws_sm90, default_ws_config, fp8_attention_ws, key_ordered_vt
from fp8lab.kernels.quantize import E4M3_MAX, quantize_delayed, quantize_fp8, quantize_fp8_delayed, quantize_fp8_static

__all__ = [
    "AttentionConfig",
    "E4M3_MAX",
    "WsConfig",
    "attention_configs",
    "compile_ws_sm90",
    "default_config",
    "default_ws_config",
    "fp8_attention",
    "fp8_attention_ws",
    "gpu_config",
    "key_ordered_vt",
    "pretranspose_v",
    "quantize_delayed",
    "quantize_fp8",
    "quantize_fp8_delayed",
    "quantize_fp8_static",
    "tune_attention",
    "v_layout_of",
]

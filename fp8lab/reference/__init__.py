"""Reference attention: exact float64 attention and a step-by-step emulation of FA3's FP8 forward.

- `attention_exact`: float64 attention (GQA/MQA, bottom-right causal, sliding window, varlen, FP8 inputs with descales).
- `attention_fa3_fp8`: FA3's FP8 forward emulated step by step; `FA3Steps` switches steps between FP8 and exact,
  `AccumulatorModel` models Hopper's FP8 MMA accumulator (and two-level accumulation).
- `quantize_qkv`: float Q, K, V to FP8 with per-(batch, KV head) or per-tensor descales.
- `attribute_error`: the error of each step alone and of all together.
"""

from fp8lab.reference.attribution import ATTRIBUTION_STEPS, attribute_error
from fp8lab.reference.exact import attention_exact
from fp8lab.reference.fa3 import (HOPPER_FP8_MMA, STEP_NAMES, AccumulatorModel, FA3Steps, attention_fa3_fp8,
                                  fa3_block_n, fa3_decode_splits, mma)
from fp8lab.reference.inputs import QuantizedQKV, quantize_qkv
from fp8lab.reference.masks import normalize_window, visible

__all__ = [
    "ATTRIBUTION_STEPS",
    "HOPPER_FP8_MMA",
    "AccumulatorModel",
    "FA3Steps",
    "QuantizedQKV",
    "STEP_NAMES",
    "attention_exact",
    "attention_fa3_fp8",
    "attribute_error",
    "fa3_block_n",
    "fa3_decode_splits",
    "mma",
    "normalize_window",
    "quantize_qkv",
    "visible",
]

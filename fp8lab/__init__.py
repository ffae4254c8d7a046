"""fp8lab: a research and teaching kit for FP8 attention on GPUs.

The short public API; each subject's full API lives in its module
(`fp8lab.formats`, `fp8lab.scaling`, `fp8lab.reference`, `fp8lab.metrics`,
`fp8lab.data`, `fp8lab.transforms`, `fp8lab.kvcache`, `fp8lab.backends`,
`fp8lab.kernels`, `fp8lab.bench`, `fp8lab.env`, `fp8lab.notebooks`).

    import fp8lab
    q8, q_descale = fp8lab.quantize_for_fa3(q, fp8lab.ScaleStrategy(fp8lab.PerHead(heads_kv)), heads_kv)
    out = fp8lab.attention(q8, k8, v8, q_descale=q_descale, k_descale=k_descale, v_descale=v_descale)
"""

from fp8lab import data, env, formats, kvcache, layout, metrics, reference, scaling, transforms
from fp8lab.backends import attention
from fp8lab.formats import cast_to_fp8, get_format
from fp8lab.reference import attention_exact, attention_fa3_fp8
from fp8lab.scaling import (
    PerBlock,
    PerChannel,
    PerHead,
    PerTensor,
    PerToken,
    ScaleStrategy,
    dequantize,
    quantize,
    quantize_for_fa3,
)

__version__ = "0.1.0"

__all__ = [
    "PerBlock",
    "PerChannel",
    "PerHead",
    "PerTensor",
    "PerToken",
    "ScaleStrategy",
    "attention",
    "attention_exact",
    "attention_fa3_fp8",
    "cast_to_fp8",
    "data",
    "dequantize",
    "env",
    "formats",
    "get_format",
    "kvcache",
    "layout",
    "metrics",
    "quantize",
    "quantize_for_fa3",
    "reference",
    "scaling",
    "transforms",
]


def __getattr__(name: str):
    # Triton kernels load on first use: importing triton is slow and needs no GPU until then.
    if name in ("kernels", "bench"):
        import importlib

        return importlib.import_module(f"fp8lab.{name}")
    raise AttributeError(f"module 'fp8lab' has no attribute {name!r}")

"""fp8lab: a research and teaching kit for FP8 attention on GPUs.

The short public API; each subject's full API lives in its module
(`fp8lab.formats`, `fp8lab.scaling`, `fp8lab.reference`, `fp8lab.metrics`,
`fp8lab.data`, `fp8lab.transforms`, `fp8lab.layout`, `fp8lab.kvcache`, `fp8lab.backends`,
`fp8lab.kernels`, `fp8lab.bench`, `fp8lab.records`, `fp8lab.env`, `fp8lab.notebooks`).

    import fp8lab
    q8, q_descale = fp8lab.quantize_for_fa3(q, fp8lab.ScaleStrategy(fp8lab.PerHead(heads_kv)), heads_kv)
    out = fp8lab.attention(q8, k8, v8, q_descale=q_descale, k_descale=k_descale, v_descale=v_descale)
"""

from fp8lab import data, env, formats, kvcache, layout, metrics, reference, scaling, transforms
from fp8lab.backends import BackendError, attention, choose_backend, prepare_attention
from fp8lab.formats import FP8Format, cast_to_fp8, get_format, probe_torch_casts
from fp8lab.reference import AccumulatorModel, FA3Steps, attention_exact, attention_fa3_fp8
from fp8lab.scaling import (
    CurrentAmax,
    DelayedAmax,
    PerBlock,
    PerChannel,
    PerHead,
    PerTensor,
    PerToken,
    ScaleStrategy,
    StaticAmax,
    dequantize,
    quantize,
    quantize_for_fa3,
    resolve_checkpoint_scales,
)

__version__ = "0.1.0"

__all__ = [
    "AccumulatorModel",
    "BackendError",
    "CurrentAmax",
    "DelayedAmax",
    "FA3Steps",
    "FP8Format",
    "PerBlock",
    "PerChannel",
    "PerHead",
    "PerTensor",
    "PerToken",
    "ScaleStrategy",
    "StaticAmax",
    "attention",
    "attention_exact",
    "attention_fa3_fp8",
    "cast_to_fp8",
    "choose_backend",
    "data",
    "dequantize",
    "env",
    "formats",
    "get_format",
    "fp8_attention",
    "kvcache",
    "layout",
    "metrics",
    "prepare_attention",
    "probe_torch_casts",
    "quantize",
    "quantize_fp8",
    "quantize_for_fa3",
    "reference",
    "resolve_checkpoint_scales",
    "scaling",
    "transforms",
]

_LAZY = {"kernels": "fp8lab.kernels", "bench": "fp8lab.bench", "fp8_attention": "fp8lab.kernels",
         "quantize_fp8": "fp8lab.kernels"}


def __getattr__(name: str):
    # Triton kernels load on first use: importing triton is slow and needs no GPU until then.
    if name in _LAZY:
        import importlib

        module = importlib.import_module(_LAZY[name])
        return module if module.__name__ == f"fp8lab.{name}" else getattr(module, name)
    raise AttributeError(f"module 'fp8lab' has no attribute {name!r}")

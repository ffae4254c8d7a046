"""The production attention kernels behind one API, and the rules that pick one.

- `attention(...)`: FA3's layouts in, the best provider here (or the named one) runs;
  `prepare_attention(...)` does its checks and decision once, for timing and loops.
- `gating`: the pure decision (`decide`) with vLLM's FA2/FA3 version rule.
- `providers`: one adapter per provider (vLLM FA3, its bare .so, fa3-fwd,
  upstream FA3, FA2 variants, SDPA, our Triton kernel, the reference).
- `doctor`: what is installed here and what each call would use (`fp8lab doctor`).
- `fetch`: vLLM's FA3 library into fp8lab's cache, checksum recorded (`fp8lab fa3 fetch`).
"""

from fp8lab.backends.api import BackendError, PreparedAttention, attention, choose_backend, prepare_attention
from fp8lab.backends.gating import (
    BACKENDS,
    PROVIDERS,
    Decision,
    Device,
    Request,
    decide,
    flash_attn_supports_fp8,
    flash_attn_version,
)
from fp8lab.backends.providers import probe_all

__all__ = [
    "BACKENDS",
    "PROVIDERS",
    "BackendError",
    "Decision",
    "Device",
    "PreparedAttention",
    "Request",
    "attention",
    "choose_backend",
    "decide",
    "flash_attn_supports_fp8",
    "flash_attn_version",
    "prepare_attention",
    "probe_all",
]

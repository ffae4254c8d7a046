"""Which attention backend runs a call, and why the others do not: a pure decision.

Nothing here touches a GPU or imports a provider. `decide` takes a *simulated*
device (a compute capability, or None for the CPU), the set of providers that
are installed, the request (dtype, head dims, lse or not) and the environment,
and returns a `Decision`: the backend and provider chosen and, for every
provider passed over, the reasons. Tests and notebook 04 drive it with Ampere,
Ada, Hopper, Blackwell and CPU "devices" that this machine does not have.

The FlashAttention version rule mirrors vLLM's (vllm-project/vllm,
`vllm/v1/attention/backends/fa_utils.py::get_flash_attn_version` and
`flash_attn_supports_fp8`; `vllm/vllm_flash_attn/flash_attn_interface.py::
_is_fa2_supported/_is_fa3_supported`):

1. default: FA3 if the major compute capability is 9 and FA3 is available, else FA2;
2. an override (vLLM: `VLLM_FLASH_ATTN_VERSION`, now a config field; here
   `FP8LAB_FLASH_ATTN_VERSION=2|3`) replaces the default;
3. Blackwell (major >= 10) falls back from FA3 (vLLM: to FA4 if supported,
   else FA2; fp8lab has no FA4, so FA2);
4. the version must then be supported (FA2: capability >= 8.0, FA3: 9.x), else
   there is no FlashAttention at all (vLLM returns None).

FP8 inputs need FA3 on 9.x (`flash_attn_supports_fp8`). FA2 given FP8 is
rejected with a reason saying what to do; `fp8_fallback="dequantize"` lets FA2
(or SDPA) run on the dequantized bf16 inputs instead.

Per-provider input rules come from the kernels' own checks (Dao-AILab/
flash-attention `hopper/flash_api.cpp`: head_size <= 256, a multiple of 8 for
16-bit and 16 for FP8 inputs, different V head dims only on Hopper in two
ranges; compiled tiles for head dims 64, 96, 128, 192, 256, smaller dims padded
up to the next tile).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from fp8lab import env as fp8lab_env
from fp8lab.layout import check_count

__all__ = [
    "BACKENDS",
    "DTYPES",
    "HEAD_DIM_RULES",
    "PROVIDERS",
    "Decision",
    "Device",
    "ProviderSpec",
    "Request",
    "architecture",
    "capability_rows",
    "decide",
    "flash_attn_supports_fp8",
    "flash_attn_version",
    "flash_attn_version_rows",
    "is_fa_version_supported",
    "provider_order",
    "provider_reasons",
]

BACKENDS = ("fa3", "fa2", "sdpa", "triton", "reference")
# dtype names used by gating (torch-free so simulated requests need no tensors).
DTYPES = ("fp8", "bf16", "fp16", "fp32", "fp64")
FA3_TILE_HEAD_DIMS = (64, 96, 128, 192, 256)
VERSION_ENV = "FP8LAB_FLASH_ATTN_VERSION"
FP8_FALLBACKS = ("error", "dequantize")



def _check_capability(capability: object) -> None:
    """None (the CPU) or a (major, minor) tuple of two ints >= 0, as torch.cuda.get_device_capability gives."""
    if capability is None:
        return
    ok = (isinstance(capability, tuple) and len(capability) == 2
          and all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in capability))
    if not ok:
        raise ValueError(f"capability: expected None (the CPU) or a (major, minor) tuple of ints such as (9, 0), "
                         f"got {capability!r}")


def architecture(capability: tuple[int, int] | None) -> str:
    """NVIDIA architecture name for a compute capability ("CPU" for None)."""
    if capability is None:
        return "CPU"
    if capability == (8, 9):
        return "Ada"
    return {7: "Volta/Turing", 8: "Ampere", 9: "Hopper", 10: "Blackwell", 11: "Blackwell", 12: "Blackwell"}.get(
        capability[0], "unknown"
    )


@dataclass(frozen=True)
class Device:
    """A real or simulated device: `capability` (major, minor) for a CUDA GPU, None for the CPU."""

    capability: tuple[int, int] | None = None
    name: str = ""

    def __post_init__(self) -> None:
        _check_capability(self.capability)

    @property
    def is_cuda(self) -> bool:
        return self.capability is not None

    def describe(self) -> str:
        if self.capability is None:
            return self.name or "CPU"
        major, minor = self.capability
        arch = architecture(self.capability)
        label = self.name or f"sm_{major}{minor}"
        return f"{label} (compute capability {major}.{minor}, {arch})"


@dataclass(frozen=True)
class Request:
    """What a call needs: dtype name (see `DTYPES`), head dims, and whether lse is wanted."""

    dtype: str
    head_dim: int
    head_dim_v: int | None = None
    return_lse: bool = False
    fp8_fallback: str = "error"
    varlen: bool = False  # cu_seqlens given
    lengths_on_device: bool = False  # varlen under CUDA-graph capture: the lengths cannot be read on the host
    pv_flush: bool = False  # FP8: each key block's P V added to O in fp32 (two-level accumulation)

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype: expected one of {DTYPES}, got {self.dtype!r}")
        if self.fp8_fallback not in FP8_FALLBACKS:
            raise ValueError(f"fp8_fallback: expected one of {FP8_FALLBACKS}, got {self.fp8_fallback!r}")
        check_count("head_dim", self.head_dim, 1)
        if self.head_dim_v is not None:
            check_count("head_dim_v", self.head_dim_v, 1)

    @property
    def dv(self) -> int:
        return self.head_dim if self.head_dim_v is None else self.head_dim_v


@dataclass(frozen=True)
class ProviderSpec:
    """What one provider can run, as data (the adapters live in `providers.py`)."""

    name: str
    backend: str
    summary: str
    dtypes: tuple[str, ...]
    cuda: bool = True  # runs on CUDA GPUs
    cpu: bool = False  # runs on the CPU (triton: only under TRITON_INTERPRET=1)
    min_capability: tuple[int, int] = (8, 0)
    capability_major: int | None = None  # 9 for FA3: only this family
    head_dims: str = "any"  # "fa3" | "fa2" | "any" | "triton" | "gluon"
    returns_lse: bool = True
    fp8_min_capability: tuple[int, int] | None = None
    varlen: bool = True  # takes cu_seqlens
    varlen_on_device: bool = True  # reads them on the device only (so a varlen call can be captured in a CUDA graph)
    fp8_pv: str = "-"  # how O sums FP8 P V: "mma", "flush", "option" or "fp32" (`FP8_PV_ACCUMULATION`)


# The registry, in the default order within each backend. Names are what users
# write in backend="fa3:<name>" and in FP8LAB_<BACKEND>_PROVIDERS.
PROVIDERS: dict[str, ProviderSpec] = {
    s.name: s
    for s in (
        ProviderSpec("vllm", "fa3", "vllm.vllm_flash_attn.flash_attn_varlen_func(fa_version=3) (pip install vllm)",
                     ("fp8", "bf16", "fp16"), capability_major=9, head_dims="fa3", fp8_pv="flush"),
        ProviderSpec("vllm-so", "fa3", "vLLM's _vllm_fa3_C.abi3.so via torch.ops.load_library (fp8lab fa3 fetch)",
                     ("fp8", "bf16", "fp16"), capability_major=9, head_dims="fa3", fp8_pv="flush"),
        ProviderSpec("fa3-fwd", "fa3", "fa3_fwd_interface from the fa3-fwd wheel (pip install fa3-fwd==0.0.3); no fp16",
                     ("fp8", "bf16"), capability_major=9, head_dims="fa3", fp8_pv="mma"),
        ProviderSpec("flash-attn-3", "fa3", "upstream flash_attn_interface built from Dao-AILab/flash-attention hopper/",
                     ("fp8", "bf16", "fp16"), capability_major=9, head_dims="fa3", fp8_pv="mma"),
        ProviderSpec("vllm-fa2", "fa2", "vllm.vllm_flash_attn.flash_attn_varlen_func(fa_version=2)",
                     ("bf16", "fp16"), head_dims="fa2"),
        ProviderSpec("flash-attn-2", "fa2", "flash_attn 2.x (flash_attn_func / flash_attn_varlen_func)",
                     ("bf16", "fp16"), head_dims="fa2"),
        ProviderSpec("sdpa-flash", "fa2", "torch SDPA forced to its FlashAttention-2 backend (no lse)",
                     ("bf16", "fp16"), head_dims="fa2", returns_lse=False, varlen_on_device=False),
        ProviderSpec("sdpa", "sdpa", "torch.nn.functional.scaled_dot_product_attention, default dispatch (cuDNN/flash/efficient/math; no lse)",
                     ("bf16", "fp16", "fp32", "fp64"), cpu=True, min_capability=(0, 0), returns_lse=False,
                     varlen_on_device=False),
        ProviderSpec("sdpa-cudnn", "sdpa", "torch SDPA forced to cuDNN attention (no lse)",
                     ("bf16", "fp16"), head_dims="fa3", returns_lse=False, varlen_on_device=False),
        ProviderSpec("gluon", "triton", "fp8lab.kernels.fp8_attention_ws, our kernel with FA3's warp-specialized "
                     "schedule in Gluon (the faster one on Hopper; batched only, head dims 64/128/256)",
                     ("fp8",), capability_major=9, head_dims="gluon", varlen=False, fp8_pv="option"),
        ProviderSpec("triton", "triton", "fp8lab.kernels.fp8_attention, our Triton kernel",
                     ("fp8",), cpu=True, head_dims="triton", fp8_min_capability=(8, 9), fp8_pv="option"),
        ProviderSpec("reference", "reference", "fp8lab.reference: attention_fa3_fp8 (FP8) / attention_exact (float64 math)",
                     DTYPES, cpu=True, min_capability=(0, 0), varlen_on_device=False, fp8_pv="fp32"),
    )
}

# `ProviderSpec.fp8_pv` in words: how each provider sums P V over the key blocks for FP8 inputs.
# Hopper's FP8 MMA keeps about 13 bits of its accumulator (notebook 05 (e)), so where O itself is
# that accumulator the error grows with the context (rel. L2 0.44 at 64k keys on V + 1 inputs, H200).
FP8_PV_ACCUMULATION: dict[str, str] = {
    "mma": "O is the FP8 MMA's accumulator across all key blocks (upstream FA3): error grows with the context",
    "flush": "each key block's P V added to O in fp32 (vLLM's two levels, vllm-project/flash-attention#104, in "
             "vLLM since vllm-project/vllm#27889 of 2025-10-31; measured on 0.33.0's library)",
    "option": "upstream FA3's way, or with pv_flush=True vLLM's two levels (fp8lab's kernels, v28)",
    "fp32": "fp32 arithmetic (the emulation)",
    "-": "no FP8",
}


def provider_order(backend: str, env: Mapping[str, str] | None = None) -> list[str]:
    """Provider names of `backend` in search order; `FP8LAB_<BACKEND>_PROVIDERS=a,b` overrides it."""
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    default = [s.name for s in PROVIDERS.values() if s.backend == backend]
    env = os.environ if env is None else env
    var = f"FP8LAB_{backend.upper()}_PROVIDERS"
    if not env.get(var):
        return default
    names = [n.strip() for n in env[var].split(",") if n.strip()]
    unknown = [n for n in names if n not in default]
    if unknown:
        raise ValueError(f"{var}: unknown {backend} providers {unknown}; known: {default}")
    return names


# `ProviderSpec.head_dims` rules in words (what `_head_dim_reasons` checks).
HEAD_DIM_RULES: dict[str, str] = {
    "fa3": "<= 256, multiple of 8 (FP8: 16)", "fa2": "<= 256, multiple of 8, dv == d",
    "triton": "16..256, multiple of 16 (FP8 on a GPU: from 32), dv == d", "gluon": "64, 128 or 256, dv == d",
    "any": "any",
}


def capability_rows() -> list[dict[str, object]]:
    """`PROVIDERS` as a table, one row per provider: backend, dtypes, where it runs, what FP8 needs,
    head dims (`HEAD_DIM_RULES`), varlen, lse (notebook 04's capability matrix)."""
    def where(s: ProviderSpec) -> str:
        if s.capability_major is not None:
            return f"{s.capability_major}.x only"
        least = max(s.min_capability, s.fp8_min_capability or (0, 0)) if s.dtypes == ("fp8",) else s.min_capability
        out = [(f">= {least[0]}.{least[1]}" if least > (0, 0) else "any GPU")] if s.cuda else []
        if s.cpu:
            out.append("CPU" + (" (TRITON_INTERPRET=1)" if s.backend == "triton" else ""))
        return ", ".join(out)

    def fp8_needs(s: ProviderSpec) -> str:
        if "fp8" not in s.dtypes:
            return "-"
        if s.fp8_min_capability:
            return f">= {s.fp8_min_capability[0]}.{s.fp8_min_capability[1]}"
        return f"{s.capability_major}.x" if s.capability_major else "any"

    return [{"backend": s.backend, "provider": s.name, "dtypes": "/".join(s.dtypes), "GPU": where(s),
             "FP8 needs": fp8_needs(s),
             "head dims": HEAD_DIM_RULES[s.head_dims].replace(" (FP8: 16)", "" if "fp8" not in s.dtypes else " (FP8: 16)"),
             "varlen": s.varlen,
             "lse": s.returns_lse, "FP8 P V sum": s.fp8_pv} for s in PROVIDERS.values()]


def _head_dim_reasons(rule: str, req: Request) -> list[str]:
    d, dv = req.head_dim, req.dv
    if rule == "any":
        return []
    if rule == "triton":
        # fp8lab.kernels.attention._check_kernel_support (and _check_config on a GPU, below): a test holds them equal
        ok = d == dv and d % 16 == 0 and 16 <= d <= 256
        return [] if ok else [f"the Triton kernel needs head_dim == head_dim_v, a multiple of 16 in [16, 256], got {d}/{dv}"]
    if rule == "gluon":
        # fp8lab.kernels.attention_ws.fp8_attention_ws
        ok = d == dv and d in (64, 128, 256)
        return [] if ok else [f"the Gluon kernel needs head_dim == head_dim_v in (64, 128, 256), got {d}/{dv}"]
    reasons = []
    align = 16 if req.dtype == "fp8" else 8
    for label, x in (("head_dim", d), ("head_dim_v", dv))[: 1 if d == dv else 2]:
        if x > 256 and not (label == "head_dim_v" and rule == "fa3" and d <= 64 and req.dtype != "fp8" and x <= 512):
            reasons.append(f"{label} {x} > 256, the largest FlashAttention supports")
        if x % align:
            why = "FP8 inputs" if align == 16 else "16-bit inputs"
            reasons.append(f"{label} {x} is not a multiple of {align} (required for {why})")
    if d != dv:
        if rule == "fa2":
            reasons.append(f"head_dim_v {dv} != head_dim {d}: FA2 needs equal head dims")
        elif not ((128 < d <= 192 and 96 < dv <= 128) or (d <= 64 and dv <= 512)):
            reasons.append(
                f"head_dim {d} with head_dim_v {dv}: FA3 allows different V dims only for "
                "Q/K in (128, 192] with V in (96, 128], or Q/K <= 64 with V <= 512"
            )
    return reasons


def _interpreted(env: Mapping[str, str]) -> tuple[bool, str]:
    """Whether the Triton kernels run interpreted, and a note where TRITON_INTERPRET now disagrees: for this
    process (env is os.environ) as fp8lab.kernels were defined; for a simulated machine, as env asks."""
    if env is os.environ:
        return fp8lab_env.triton_interpret(), fp8lab_env.triton_interpret_note()
    return env.get("TRITON_INTERPRET", "").strip().lower() in fp8lab_env.TRUE_SPELLINGS, ""


def provider_reasons(
    spec: ProviderSpec, device: Device, req: Request, env: Mapping[str, str] | None = None
) -> tuple[list[str], bool]:
    """Why `spec` cannot run `req` on `device` (empty = it can), and whether it needs dequantized inputs."""
    env = os.environ if env is None else env
    reasons: list[str] = []
    dequantize = False
    if device.capability is None:
        if not spec.cpu:
            reasons.append("needs a CUDA GPU; this is the CPU")
        elif spec.backend == "triton" and not (interp := _interpreted(env))[0]:
            reasons.append("on the CPU Triton runs only in its interpreter: set TRITON_INTERPRET=1 before importing "
                           "triton" + interp[1])
    else:
        cap = device.capability
        if not spec.cuda:
            reasons.append("runs on the CPU only")
        elif spec.capability_major is not None and cap[0] != spec.capability_major:
            if spec.backend == "fa3":
                reasons.append(
                    f"FA3 kernels are built for compute capability {spec.capability_major}.x (Hopper) only; "
                    f"this is {device.describe()}"
                    + ("; Blackwell falls back from FA3 (vLLM: to FA4, else FA2)" if cap[0] >= 10 else "")
                )
            else:
                reasons.append(f"{spec.name} is written for compute capability {spec.capability_major}.x (Hopper: TMA, "
                               f"wgmma, setmaxnreg) only; this is {device.describe()}")
        elif cap < spec.min_capability:
            reasons.append(f"needs compute capability >= {spec.min_capability[0]}.{spec.min_capability[1]}, this is {cap[0]}.{cap[1]}")
        if req.dtype == "fp8" and spec.fp8_min_capability and cap < spec.fp8_min_capability:
            m = spec.fp8_min_capability
            reasons.append(f"FP8 tensor-core MMAs need compute capability >= {m[0]}.{m[1]} (Ada, Hopper, Blackwell), this is {cap[0]}.{cap[1]}")
        if (req.dtype == "fp8" and spec.head_dims == "triton" and req.head_dim <= 16
                and not _interpreted(env)[0]):
            # fp8lab.kernels.attention._check_config: the padded head_dim is the FP8 MMA's reduction (>= 32)
            reasons.append(f"the Triton kernel's FP8 MMAs on a GPU need head_dim >= 32 (padded to a power of two), "
                           f"got {req.head_dim}")
    if req.dtype not in spec.dtypes:
        if req.dtype == "fp8" and "bf16" in spec.dtypes and req.fp8_fallback == "dequantize":
            dequantize = True
        elif req.dtype == "fp8" and spec.backend == "fa2":
            reasons.append(
                "FA2 cannot run FP8 inputs: FP8 attention needs FA3 on a compute capability 9.x (Hopper) GPU "
                "(vLLM: 'FlashAttention does not support fp8 kv-cache on this device'). Use backend='fa3' on Hopper, "
                "backend='triton' from compute capability 8.9 (Ada, Hopper, Blackwell), backend='reference' anywhere, or pass fp8_fallback='dequantize' "
                "to run FA2 on the dequantized bf16 inputs"
            )
        elif req.dtype == "fp8":
            reasons.append(f"{spec.name} takes {'/'.join(spec.dtypes)}, not FP8 (fp8_fallback='dequantize' runs it on dequantized bf16)")
        else:
            reasons.append(f"{spec.name} takes {'/'.join(spec.dtypes)}, not {req.dtype}")
    if req.varlen and not spec.varlen:
        reasons.append(f"{spec.name} takes batched inputs only, not varlen (cu_seqlens)")
    elif req.varlen and req.lengths_on_device and (dequantize or not spec.varlen_on_device):
        reasons.append(f"{'dequantizing for ' if dequantize else ''}{spec.name} reads the varlen sequence lengths on the "
                       "host, which a CUDA-graph capture forbids (captured varlen calls run on fa3, fa2 and triton "
                       "providers)")
    req_eff = Request("bf16", req.head_dim, req.head_dim_v, req.return_lse, varlen=req.varlen) if dequantize else req
    reasons += _head_dim_reasons(spec.head_dims, req_eff)
    if req.return_lse and not spec.returns_lse:
        reasons.append("does not return the logsumexp (return_lse=True)")
    if req.pv_flush and req.dtype == "fp8" and not dequantize and spec.fp8_pv == "mma":
        reasons.append(f"{spec.name} keeps O in the FP8 MMA's accumulator across all key blocks (upstream FA3), and "
                       "pv_flush=True asks for each block added in fp32: vLLM's FA3 (vllm, vllm-so) or backend='triton' "
                       "do that")
    return reasons, dequantize


def is_fa_version_supported(
    version: int, capability: tuple[int, int] | None, available: Iterable[str]
) -> tuple[bool, str | None]:
    """vLLM's `_is_fa2_supported` / `_is_fa3_supported`: installed, and the right compute capability."""
    available = set(available)
    backend = {2: "fa2", 3: "fa3"}.get(version)
    if backend is None:
        raise ValueError(f"FlashAttention version: expected 2 or 3, got {version!r}")
    if not any(PROVIDERS[n].backend == backend for n in available if n in PROVIDERS):
        return False, f"FA{version} is unavailable: no {backend} provider installed ({', '.join(provider_order(backend, {}))})"
    if capability is None:
        return False, f"FA{version} needs a CUDA GPU"
    if version == 2 and capability < (8, 0):
        return False, "FA2 is only supported on devices with compute capability >= 8"
    if version == 3 and capability[0] != 9:
        return False, "FA3 is only supported on devices with compute capability 9.x"
    return True, None


def _override(env: Mapping[str, str]) -> int | None:
    raw = env.get(VERSION_ENV, "").strip()
    if not raw:
        return None
    if raw not in ("2", "3"):
        raise ValueError(f"{VERSION_ENV}: expected 2 or 3, got {raw!r}")
    return int(raw)


def flash_attn_version(
    capability: tuple[int, int] | None,
    available: Iterable[str],
    env: Mapping[str, str] | None = None,
) -> tuple[int | None, list[str]]:
    """vLLM's `get_flash_attn_version` for fp8lab: the FA version to use (None = none) and notes on why."""
    env = os.environ if env is None else env
    _check_capability(capability)
    available = set(available)
    notes: list[str] = []
    if capability is None:
        return None, ["no CUDA device: no FlashAttention"]
    fa3_ok, _ = is_fa_version_supported(3, capability, available)
    version = 3 if capability[0] == 9 and fa3_ok else 2
    notes.append(f"default FA{version}: " + ("capability 9.x and FA3 available" if version == 3 else "not (capability 9.x and FA3 available)"))
    override = _override(env)
    if override is not None:
        notes.append(f"{VERSION_ENV}={override} overrides the default")
        version = override
    if capability[0] >= 10 and version == 3:
        notes.append("cannot use FA3 on Blackwell (capability >= 10): falling back to FA2 (vLLM: FA4 if supported)")
        version = 2
    ok, reason = is_fa_version_supported(version, capability, available)
    if not ok:
        notes.append(f"FA{version} is not supported: {reason}")
        return None, notes
    return version, notes


def flash_attn_supports_fp8(
    capability: tuple[int, int] | None, available: Iterable[str], env: Mapping[str, str] | None = None
) -> bool:
    """vLLM's `flash_attn_supports_fp8`: the chosen version is FA3 and the device is 9.x."""
    version, _ = flash_attn_version(capability, available, env)
    return version == 3 and capability is not None and capability[0] == 9


def flash_attn_version_rows(
    devices: Mapping[str, Device], available: Iterable[str], overrides: Iterable[int | None] = (None, 2, 3)
) -> list[dict[str, object]]:
    """`flash_attn_version` for each named device and each override (None = no override): one row
    each, with the version ("none" for no FlashAttention), `flash_attn_supports_fp8` and the last
    note (why the rule ended where it did)."""
    available = set(available)
    rows = []
    for machine, dev in devices.items():
        for override in overrides:
            if override not in (None, 2, 3):
                raise ValueError(f"overrides: expected None, 2 or 3, got {override!r}")
            env = {VERSION_ENV: str(override)} if override else {}
            version, notes = flash_attn_version(dev.capability, available, env)
            rows.append({"machine": machine, "override": str(override) if override else "-",
                         "FA version": version or "none",
                         "supports FP8": flash_attn_supports_fp8(dev.capability, available, env),
                         "why": notes[-1]})
    return rows


@dataclass(frozen=True)
class Decision:
    """The outcome of `decide`: chosen provider (None when nothing can run) and the reasons for the rest."""

    backend: str | None
    provider: str | None
    dequantize: bool
    fa_version: int | None
    rejected: dict[str, tuple[str, ...]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    request: Request | None = None
    device: Device | None = None

    @property
    def ok(self) -> bool:
        return self.provider is not None

    def label(self) -> str:
        """Short form for tables: 'fa3:vllm-so', 'fa2:sdpa-flash (dequantized)', or 'error'."""
        if not self.ok:
            return "error"
        return f"{self.backend}:{self.provider}" + (" (dequantized)" if self.dequantize else "")

    def explain(self) -> str:
        """Every step and rejection, one line each."""
        lines = [f"chosen: {self.label()}"]
        lines += [f"note: {n}" for n in self.notes]
        lines += [f"rejected {name}: {'; '.join(r)}" for name, r in self.rejected.items()]
        return "\n".join(lines)

    def error_message(self, asked: str) -> str:
        req, dev = self.request, self.device
        what = f"{req.dtype} inputs, head_dim {req.head_dim}" + (f"/{req.dv}" if req and req.dv != req.head_dim else "") if req else "this call"
        where = dev.describe() if dev else "this device"
        lines = [f"no attention provider for backend={asked!r} can run {what} on {where}:"]
        lines += [f"  - {name}: {'; '.join(r)}" for name, r in self.rejected.items()]
        lines += [f"  (note: {n})" for n in self.notes]
        return "\n".join(lines)


def _parse_backend(backend: str) -> tuple[str, str | None]:
    if not isinstance(backend, str):
        raise TypeError(f"backend: expected a str, got {type(backend).__name__}")
    name, _, provider = backend.partition(":")
    if name not in BACKENDS + ("auto",):
        raise ValueError(f"backend: expected 'auto', one of {BACKENDS}, or '<backend>:<provider>', got {backend!r}")
    if provider:
        if provider not in PROVIDERS or PROVIDERS[provider].backend != name:
            known = [s.name for s in PROVIDERS.values() if s.backend == name]
            raise ValueError(f"backend {backend!r}: {name} has providers {known}, got {provider!r}")
        return name, provider
    return name, None


def decide(
    device: Device,
    available: Iterable[str],
    request: Request,
    backend: str = "auto",
    env: Mapping[str, str] | None = None,
    unavailable_reasons: Mapping[str, str] | None = None,
) -> Decision:
    """Choose the provider for `request` on `device` given the installed providers `available`.

    backend="auto": the FlashAttention version by vLLM's rule, then fp8lab's own
    kernels (backend "triton", FP8 only: "gluon" on Hopper for batched inputs, then
    the Triton kernel), then sdpa, then (on the CPU only) the reference. An explicit
    backend ("fa3", "fa2", "sdpa", "triton", "reference", or "fa3:fa3-fwd" for
    one provider) considers only its providers. `unavailable_reasons` maps a
    provider that is not available to why (shown in the rejections).
    """
    env = os.environ if env is None else env
    available = set(available)
    unknown = available - set(PROVIDERS)
    if unknown:
        raise ValueError(f"available: unknown providers {sorted(unknown)}; known: {list(PROVIDERS)}")
    unavailable_reasons = dict(unavailable_reasons or {})
    name, pinned = _parse_backend(backend)
    rejected: dict[str, tuple[str, ...]] = {}
    notes: list[str] = []
    fa_version = None

    if name == "auto":
        fa_version, notes = flash_attn_version(device.capability, available, env)
        candidates: list[str] = []
        for version in (3, 2):
            for p in provider_order(f"fa{version}", env):
                if version == fa_version:
                    candidates.append(p)
                    continue
                rule = f"the FlashAttention version rule chose FA{fa_version}" if fa_version else "the FlashAttention version rule chose no FA"
                more = provider_reasons(PROVIDERS[p], device, request, env)[0] if p in available else \
                    [unavailable_reasons.get(p, "not installed")]
                rejected[p] = (rule, *more)
        if request.dtype == "fp8" and fa_version is not None and fa_version != 3:
            notes.append("FP8 needs FA3 (flash_attn_supports_fp8 is False here)")
        candidates += provider_order("triton", env) + provider_order("sdpa", env) + provider_order("reference", env)
    else:
        candidates = [pinned] if pinned else provider_order(name, env)

    for p in candidates:
        spec = PROVIDERS[p]
        if p not in available:
            rejected[p] = (unavailable_reasons.get(p, "not installed"),)
            continue
        if name == "auto" and spec.backend == "reference" and device.is_cuda:
            rejected[p] = ("auto never picks the slow reference on a GPU; ask for backend='reference'",)
            continue
        if name == "auto" and spec.backend == "triton" and request.dtype != "fp8":
            rejected[p] = ("auto uses fp8lab's own kernels for FP8 inputs only",)
            continue
        if name == "auto" and spec.backend == "triton" and spec.cpu and not device.is_cuda:
            rejected[p] = ("auto never picks the Triton interpreter on the CPU; ask for backend='triton'",)
            continue
        reasons, dequantize = provider_reasons(spec, device, request, env)
        if reasons:
            rejected[p] = tuple(reasons)
            continue
        version = {"fa3": 3, "fa2": 2}.get(spec.backend)
        return Decision(spec.backend, p, dequantize, version, rejected, tuple(notes), request, device)
    return Decision(None, None, False, fa_version, rejected, tuple(notes), request, device)

"""The environment fp8lab runs in: versions, device, compute capability.

`context()` is stamped on every recorded result so a number never travels
without the GPU, driver and versions it was measured with.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import os
import platform
import shutil
import subprocess
from pathlib import Path

import torch

__all__ = ["results_dir", "context", "cuda_capability", "device", "gpu_name", "driver_version", "package_version", "triton_interpret"]


def package_version(name: str) -> str | None:
    """Installed version of a distribution, or None when it is absent."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def device() -> torch.device:
    """The device fp8lab uses by default: the first CUDA GPU if present, else the CPU."""
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def cuda_capability(index: int = 0) -> tuple[int, int] | None:
    """Compute capability `(major, minor)` of CUDA device `index`, or None without CUDA."""
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_capability(index)


def gpu_name(index: int = 0) -> str | None:
    return torch.cuda.get_device_name(index) if torch.cuda.is_available() else None


def driver_version() -> str | None:
    """NVIDIA driver version from nvidia-smi, or None where it is not available."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[0] if out.strip() else None


def results_dir(gpu: str = "h200") -> Path:
    """Where recorded GPU results live: $FP8LAB_RESULTS/<gpu>, else `results/<gpu>` in the checkout."""
    base = os.environ.get("FP8LAB_RESULTS")
    path = (Path(base) if base else Path(__file__).resolve().parent.parent / "results") / gpu
    if not path.is_dir():
        raise FileNotFoundError(f"no recorded results at {path}; set FP8LAB_RESULTS to the folder holding '{gpu}/'")
    return path


_KERNELS_INTERPRETED: bool | None = None  # what fp8lab.kernels' Triton kernels were defined as, once imported
TRUE_SPELLINGS = ("1", "true", "on", "yes", "y")  # what Triton's getenv_bool reads as true


def _interpret_requested() -> bool:
    """TRITON_INTERPRET as Triton reads it now (its knobs; else `TRUE_SPELLINGS`)."""
    try:
        import triton.knobs

        return bool(triton.knobs.runtime.interpret)
    except (ImportError, AttributeError):
        return os.environ.get("TRITON_INTERPRET", "").strip().lower() in TRUE_SPELLINGS


def set_kernels_interpreted(interpreted: bool) -> None:
    """Called by `fp8lab.kernels` on import: whether Triton made its kernels interpreted ones. Triton
    reads TRITON_INTERPRET when a kernel is defined, so that choice holds for the whole process."""
    global _KERNELS_INTERPRETED
    _KERNELS_INTERPRETED = bool(interpreted)


def triton_interpret() -> bool:
    """True when fp8lab's Triton kernels run in the CPU interpreter: as they were defined once
    `fp8lab.kernels` is imported, else as TRITON_INTERPRET asks now."""
    return _KERNELS_INTERPRETED if _KERNELS_INTERPRETED is not None else _interpret_requested()


def triton_interpret_note() -> str:
    """'' or, where TRITON_INTERPRET now asks for another mode than the kernels were defined in, what to do."""
    if _KERNELS_INTERPRETED is None or _KERNELS_INTERPRETED == _interpret_requested():
        return ""
    now = "set" if not _KERNELS_INTERPRETED else "unset"
    return (f"; TRITON_INTERPRET is {now} now, but fp8lab.kernels were defined "
            f"{'with' if _KERNELS_INTERPRETED else 'without'} the interpreter when imported (Triton reads it "
            f"then): restart the Python or Jupyter kernel with TRITON_INTERPRET{'=1 set' if now == 'set' else ' unset'} "
            "before importing fp8lab")


def context(**extra: object) -> dict:
    """What a recorded number needs beside it: date, machine, GPU, driver and versions.

    `extra` (shapes, provider names, ...) is merged in.
    """
    cap = cuda_capability()
    ctx = {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "torch": torch.__version__,
        "triton": package_version("triton"),
        "cuda": torch.version.cuda,
        "device": str(device()),
        "gpu": gpu_name(),
        "compute_capability": f"{cap[0]}.{cap[1]}" if cap else None,
        "driver": driver_version(),
        "triton_interpret": triton_interpret(),
        "fa3_fwd": package_version("fa3-fwd"),
        "vllm": package_version("vllm"),
        "fp8lab": package_version("fp8lab"),
    }
    ctx.update(extra)
    return ctx

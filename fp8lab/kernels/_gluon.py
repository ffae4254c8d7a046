"""What the Gluon kernels (`attention_ws`, `quantize_onchip`) share: Gluon's imports across the
triton versions the kit meets (3.6 on the H200 host, 3.9 in CI), the SM count their persistent
grids are sized by, and the offline sm_90 compile.

Without Gluon (triton < 3.5) only `HAVE_GLUON = False` is defined, and the CPU-only kit still
imports both kernel modules.
"""

from __future__ import annotations

import functools

import torch
import triton

from fp8lab.env import triton_interpret

try:  # Gluon ships with triton >= 3.5
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    # triton 3.6 names the TMA load async_copy_global_to_shared and the CTA barrier thread_barrier;
    # 3.9 async_load and barrier
    tma_load = tma.async_load if hasattr(tma, "async_load") else tma.async_copy_global_to_shared
    thread_barrier = gl.barrier if hasattr(gl, "barrier") else gl.thread_barrier
    HAVE_GLUON = True
except ImportError:  # pragma: no cover - depends on the installed triton
    HAVE_GLUON = False

if HAVE_GLUON:  # triton 3.6 names a shared-memory view of other dtype/shape _reinterpret, 3.9 reinterpret
    if hasattr(gl.shared_memory_descriptor, "reinterpret"):
        @gluon.jit
        def smem_reinterpret(desc, dtype: gl.constexpr, shape: gl.constexpr, layout: gl.constexpr):
            return desc.reinterpret(dtype, shape, layout)
    else:
        @gluon.jit
        def smem_reinterpret(desc, dtype: gl.constexpr, shape: gl.constexpr, layout: gl.constexpr):
            return desc._reinterpret(dtype, shape, layout)


__all__ = ["HAVE_GLUON", "TensorDescriptor", "compile_sm90", "fence_async_shared", "gl", "gluon", "mbarrier",
           "sm_count", "smem_reinterpret", "thread_barrier", "tma_load", "warpgroup_mma", "warpgroup_mma_wait"]


@functools.cache
def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device (132 on an H200), looked up once per device."""
    return torch.cuda.get_device_properties(device).multi_processor_count


def compile_sm90(kernel, types: dict[str, str], const: dict, divisible_by_16: tuple[str, ...] = (), **options):
    """Compile a Gluon kernel for sm_90 without a GPU (triton's bundled ptxas); returns triton's
    compiled kernel (`.asm["ptx"]`, `.asm["cubin"]`, `.metadata.shared`).

    types: signature types by parameter name (others are "i32"); const: the constexprs;
    divisible_by_16: parameters the JIT would see as 16-divisible on a GPU (aligned pointers,
    strides); options: e.g. num_warps, maxnreg.
    """
    import inspect

    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    name = getattr(kernel, "__name__", "the kernel")
    if not HAVE_GLUON:
        raise RuntimeError(f"compiling {name} needs Gluon (triton >= 3.5); this triton is {triton.__version__}")
    if triton_interpret():
        raise RuntimeError(f"compiling {name}: TRITON_INTERPRET=1 replaces Gluon functions by interpreted ones; "
                           "compile in a process without it")
    params = list(inspect.signature(kernel.fn).parameters)
    sig = {p: "constexpr" if p in const else types.get(p, "i32") for p in params}
    attrs = {(params.index(p),): [["tt.divisibility", 16]] for p in divisible_by_16}
    return triton.compile(GluonASTSource(kernel, sig, const, attrs), target=GPUTarget("cuda", 90, 128),
                          options=options)

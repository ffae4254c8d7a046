"""fp8lab.kernels.attention_ws: the warp-specialized Gluon kernel (Hopper only).

Gluon has no interpreter, so on a CPU these tests check what can be checked without a
GPU: the input errors, and the sm_90 compile (triton's bundled ptxas) with the schedule
the module promises. On an H200 the kernel is compared with the FA3 emulation, with the
Triton kernel, and across descale layouts.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fp8lab.kernels import attention as A
from fp8lab.kernels import attention_ws as W
from fp8lab.kernels import pretranspose_v
from fp8lab.reference.exact import attention_exact
from fp8lab.reference.fa3 import attention_fa3_fp8

ROOT = Path(__file__).resolve().parents[1]
needs_gluon = pytest.mark.skipif(not W.HAVE_GLUON, reason="this triton has no Gluon")


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def fp8(gen: torch.Generator, *shape: int, device: str = "cpu") -> torch.Tensor:
    return (torch.randn(*shape, generator=gen) * 2).clamp(-448, 448).to(torch.float8_e4m3fn).to(device)


@needs_gluon
def test_bad_input_is_named_before_launch():
    gen = torch.Generator().manual_seed(0)
    q, k, v = fp8(gen, 1, 64, 2, 64), fp8(gen, 1, 64, 2, 64), fp8(gen, 1, 64, 2, 64)
    with pytest.raises(TypeError, match="float8_e4m3fn"):
        W.fp8_attention_ws(q.float(), k.float(), v.float())
    with pytest.raises(ValueError):  # 3-D (varlen) tensors: the Triton kernel's job
        W.fp8_attention_ws(q[0], k[0], v[0])
    with pytest.raises(RuntimeError, match="sm_90"):
        W.fp8_attention_ws(q, k, pretranspose_v(v))


COMPILE = """
import json, sys
from fp8lab.kernels import attention_ws as W
k = W.compile_ws_sm90(int(sys.argv[1]), sys.argv[2] == "1")
print(json.dumps(dict(ptx=k.asm["ptx"], shared=k.metadata.shared)))
"""


@needs_gluon
@pytest.mark.parametrize("head_dim,causal", [(64, False), (128, True), (256, False)])
def test_sm90_compile_has_the_fa3_schedule(head_dim, causal):
    # Gluon does not run under TRITON_INTERPRET=1 (set for these tests): compile in a clean process
    env = {key: val for key, val in os.environ.items() if key != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", COMPILE, str(head_dim), str(int(causal))], env=env,
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    k = json.loads(done.stdout.strip().splitlines()[-1])
    ptx = k["ptx"]
    # the consumers raise their registers (240), the loader warp gives its own back down to 24
    assert re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+24", ptx)
    # the intra-warpgroup overlap: wait for S_j while the PV product of block j-1 may still run
    assert "wgmma.wait_group.sync.aligned 1;" in ptx
    assert "cp.async.bulk.tensor" in ptx  # TMA loads
    cfg = W.default_ws_config(head_dim, causal)
    ring = cfg.stages * 2 * cfg.block_n * head_dim + cfg.block_m * head_dim  # e4m3: one byte each
    assert re.search(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+%d" % cfg.consumer_regs, ptx)
    assert ring <= k["shared"] <= ring + 2048


@pytest.mark.gpu
@pytest.mark.hopper
@needs_gluon
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_matches_emulation(d, causal):
    gen = torch.Generator().manual_seed(d * 2 + causal)
    b, sq, sk, hq, hk = 2, 203, 208, 8, 2  # GQA, ragged query and key blocks, causal with more keys
    q, k, v = fp8(gen, b, sq, hq, d, device="cuda"), fp8(gen, b, sk, hk, d, device="cuda"), fp8(gen, b, sk, hk, d, device="cuda")
    qd, kd, vd = ((torch.rand(b, hk, generator=gen) * 0.4 + 0.05).cuda() for _ in range(3))
    cfg = W.default_ws_config(d, causal)
    out, lse = W.fp8_attention_ws(q, k, pretranspose_v(v), q_descale=qd, k_descale=kd, v_descale=vd,
                                  causal=causal, config=cfg)
    emu, emu_lse = attention_fa3_fp8(q, k, v, qd, kd, vd, causal=causal, block_n=cfg.block_n, return_lse=True)
    exact = attention_exact(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, causal=causal)
    assert out.dtype == torch.bfloat16 and out.shape == q.shape and lse.shape == (b, hq, sq)
    assert torch.isfinite(out).all()
    assert rel_l2(out, emu) <= 0.6 * rel_l2(emu, exact)  # as the Triton kernel's GPU bound
    assert torch.equal(torch.isinf(lse), torch.isinf(emu_lse))
    fin = torch.isfinite(emu_lse)
    assert (lse[fin] - emu_lse[fin]).abs().max().item() < 2e-2
    tri = A.fp8_attention(q, k, pretranspose_v(v), qd, kd, vd, causal=causal,
                          config=A.AttentionConfig(cfg.block_m, cfg.block_n, 8, 2))
    assert rel_l2(out, tri) <= 0.6 * rel_l2(emu, exact)


@pytest.mark.gpu
@pytest.mark.hopper
@needs_gluon
def test_gpu_descale_layouts_give_the_same_bits():
    gen = torch.Generator().manual_seed(7)
    q, k, v = (fp8(gen, 3, 256, 4, 128, device="cuda") for _ in range(3))
    vt = pretranspose_v(v)
    per_head = torch.rand(4, generator=gen).cuda() * 0.4 + 0.05
    stride0 = per_head.expand(3, 4)
    outs = [W.fp8_attention_ws(q, k, vt, q_descale=d, k_descale=d, v_descale=d)[0]
            for d in (stride0, stride0.contiguous(), stride0.t().contiguous().t())]
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])
    with pytest.raises(ValueError, match="pre-transposed"):
        W.fp8_attention_ws(q, k, v)


@pytest.mark.gpu
@pytest.mark.hopper
@needs_gluon
@pytest.mark.parametrize("d", [64, 128, 256])
def test_gpu_fa3_scheduling_details_keep_the_bits(d):
    """Ping-pong ordering and the rescale under the next MMA move work in time, not in arithmetic."""
    gen = torch.Generator().manual_seed(d + 11)
    b, sq, sk, hq, hk = 2, 331, 336, 4, 2
    q, k, v = fp8(gen, b, sq, hq, d, device="cuda"), fp8(gen, b, sk, hk, d, device="cuda"), fp8(gen, b, sk, hk, d, device="cuda")
    qd, kd, vd = ((torch.rand(b, hk, generator=gen) * 0.4 + 0.05).cuda() for _ in range(3))
    for causal in (False, True):
        base = W.default_ws_config(d, causal)
        outs = [W.fp8_attention_ws(q, k, pretranspose_v(v), q_descale=qd, k_descale=kd, v_descale=vd, causal=causal,
                                   config=dataclasses.replace(base, pingpong=pp, rescale_under_mma=ru))
                for pp in (False, True) for ru in (False, True)]
        for out, lse in outs[1:]:
            assert torch.equal(out, outs[0][0]) and torch.equal(lse, outs[0][1])

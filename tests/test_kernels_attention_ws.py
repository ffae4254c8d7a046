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
from fp8lab.kernels import fp8_attention, pretranspose_v
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
    # switches and options before anything else, on any machine
    with pytest.raises(TypeError, match="causal: expected a bool, got str"):
        W.fp8_attention_ws(q, k, pretranspose_v(v), causal="False")
    with pytest.raises(ValueError, match="max_offset: expected a number in"):
        W.fp8_attention_ws(q, k, pretranspose_v(v), max_offset=9.0)
    with pytest.raises(TypeError, match="config: expected a WsConfig"):
        W.fp8_attention_ws(q, k, pretranspose_v(v), config={"block_n": 64})


def test_ws_config_refuses_tiles_the_kernel_cannot_build():
    """A key block that is not a power of two of at least 32 keys, or no ring of buffers, would fail
    deep in the Gluon compiler: a named error instead."""
    for bad in (dict(block_n=48), dict(block_n=16), dict(stages=0)):
        with pytest.raises(ValueError, match="block_n must be 32, 64, 128 or 256 and stages 1..8"):
            W.WsConfig(**bad)
    assert W.WsConfig(block_n=64, stages=4).label() == "ws-n64s4"


COMPILE = """
import json, sys
from fp8lab.kernels import attention_ws as W
import dataclasses
cfg = W.default_ws_config(int(sys.argv[1]), sys.argv[2] == "1", sys.argv[3] == "1")  # the default config
if sys.argv[4] == "1":  # persistent programs taking tiles from the counter
    cfg = dataclasses.replace(cfg, persistent=True, dynamic=True)
k = W.compile_ws_sm90(int(sys.argv[1]), sys.argv[2] == "1", cfg, permute_keys=sys.argv[3] == "1")
print(json.dumps(dict(ptx=k.asm["ptx"], shared=k.metadata.shared)))
"""


@needs_gluon
@pytest.mark.parametrize("head_dim,causal,permute_keys,dynamic", [
    (64, False, False, False), (128, True, False, False), (256, False, False, False), (64, False, True, False),
    (128, False, True, False), (256, True, True, False), (128, True, True, True)])
def test_sm90_compile_has_the_fa3_schedule(head_dim, causal, permute_keys, dynamic):
    # Gluon does not run under TRITON_INTERPRET=1 (set for these tests): compile in a clean process
    env = {key: val for key, val in os.environ.items() if key != "TRITON_INTERPRET"}
    args = [str(head_dim), str(int(causal)), str(int(permute_keys)), str(int(dynamic))]
    done = subprocess.run([sys.executable, "-c", COMPILE, *args], env=env,
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    k = json.loads(done.stdout.strip().splitlines()[-1])
    ptx = k["ptx"]
    # the consumers raise their registers (240; 160 with three), the loader warp gives its own back down to 24
    assert re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+24", ptx)
    # the intra-warpgroup overlap: wait for S_j while the PV product of block j-1 may still run
    assert "wgmma.wait_group.sync.aligned 1;" in ptx
    assert "cp.async.bulk.tensor" in ptx  # TMA loads
    cfg = W.default_ws_config(head_dim, causal, permute_keys)
    if dynamic:
        cfg = dataclasses.replace(cfg, persistent=True, dynamic=True)
    ring = cfg.stages * 2 * cfg.block_n * head_dim + cfg.block_m * head_dim  # e4m3: one byte each
    assert re.search(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+%d" % cfg.consumer_regs, ptx)
    assert ring <= k["shared"] <= ring + 2048
    # P's conversion to the PV wgmma's A operand: 64 index shuffles per consumer and block with
    # plain V^T; with key-ordered V^T none (one is left, outside the loop; dynamic: one more per atomic,
    # its result handed from the lane that ran it to the loader warp's others)
    shuffles = ptx.count("shfl.sync.idx")
    assert (shuffles <= 1 + 2 * cfg.dynamic) if permute_keys else (shuffles >= 32)
    # pack_p (the key-ordered default, v12): P crosses the loop as four e4m3 per word,
    # packed by the kernel's inline PTX, and its words are the PV wgmma's A registers as they are
    assert ("cvt.rn.satfinite.e4m3x2.f32 lo" in ptx) == cfg.pack_p == permute_keys
    # the dynamic scheduler: one atomic per tile taken, one when a program is done (the counter's reset)
    assert len(re.findall(r"atom\.global\.\S*add", ptx)) == (2 if cfg.dynamic else 0)


COMPILE_FLUSH = """
import json, sys
from fp8lab.kernels import attention_ws as W
d = int(sys.argv[1])
ptx = {f: W.compile_ws_sm90(d, False, W.default_ws_config(d, False, True, pv_flush=f), permute_keys=True).asm["ptx"]
       for f in (False, True)}
print(json.dumps({str(f): dict(fadd=p.count("add.f32"), wgmma=p.count("wgmma.mma_async")) for f, p in ptx.items()}))
"""


COMPILE_HALVES = """
import dataclasses, json
from fp8lab.kernels import attention_ws as W
base = W.default_ws_config(256, False, True, pv_flush=True)
ptx = {h: W.compile_ws_sm90(256, False, dataclasses.replace(base, pv_halves=h), permute_keys=True).asm["ptx"]
       for h in (False, True)}
print(json.dumps({str(h): dict(n256=p.count("m64n256k32"), n128=p.count("m64n128k32")) for h, p in ptx.items()}))
"""


def test_pv_halves_needs_pv_flush_and_no_pingpong():
    assert W.WsConfig(pv_flush=True, pv_halves=True).label() == "ws-n128s2-pf-h2"
    for bad in (dict(pv_halves=True), dict(pv_flush=True, pv_halves=True, pingpong=True)):
        with pytest.raises(ValueError, match="pv_halves splits pv_flush's product"):
            W.WsConfig(**bad)
    assert all(c.pv_flush and c.pv_halves for c in W.WS_PV_HALVES_CANDIDATES)


@needs_gluon
def test_sm90_compile_of_pv_halves_computes_p_v_in_two_128_column_products():
    """pv_halves (v28, head dim 256): the PV wgmmas are m64n128 (two per 32 keys), none m64n256."""
    env = {key: val for key, val in os.environ.items() if key != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", COMPILE_HALVES], env=env, capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = json.loads(done.stdout.strip().splitlines()[-1])
    whole, halves = counts["False"], counts["True"]
    assert whole["n256"] > 0 and halves["n256"] == 0
    assert halves["n128"] == whole["n128"] + 2 * whole["n256"]


@needs_gluon
@pytest.mark.parametrize("head_dim", [64, 128])
def test_sm90_compile_of_pv_flush_adds_each_block_to_o_in_float32(head_dim):
    """`pv_flush` (v28): the same wgmmas, each block's P V into a fresh accumulator, then one fp32 add per
    element of O's tile per block: 64 x head_dim / 128 threads = head_dim / 2 per consumer thread, in the
    loop and once more after it, for every consumer."""
    env = {key: val for key, val in os.environ.items() if key != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", COMPILE_FLUSH, str(head_dim)], env=env,
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = json.loads(done.stdout.strip().splitlines()[-1])
    plain, flush = counts["False"], counts["True"]
    consumers = W.default_ws_config(head_dim, False, True).consumers
    assert flush["wgmma"] == plain["wgmma"]
    assert flush["fadd"] - plain["fadd"] == consumers * 2 * head_dim // 2


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
    for v_in in (pretranspose_v(v), W.key_ordered_vt(v)):  # pv_flush (v28): the same bound, lse's bits
        flush, flush_lse = W.fp8_attention_ws(q, k, v_in, q_descale=qd, k_descale=kd, v_descale=vd, causal=causal,
                                              pv_flush=True)
        bn = W.default_ws_config(d, causal, isinstance(v_in, W.KeyOrderedVt)).block_n
        emu_bn = attention_fa3_fp8(q, k, v, qd, kd, vd, causal=causal, block_n=bn)
        assert rel_l2(flush, emu_bn) <= 0.6 * rel_l2(emu_bn, exact)
        if d == 256 and isinstance(v_in, W.KeyOrderedVt):  # pv_halves: every candidate, the same bound and lse
            for c in W.WS_PV_HALVES_CANDIDATES:
                halves, halves_lse = W.fp8_attention_ws(q, k, v_in, q_descale=qd, k_descale=kd, v_descale=vd,
                                                        causal=causal, config=c)
                emu_c = attention_fa3_fp8(q, k, v, qd, kd, vd, causal=causal, block_n=c.block_n)
                assert rel_l2(halves, emu_c) <= 0.6 * rel_l2(emu_c, exact), c.label()
                plain_c = W.fp8_attention_ws(q, k, v_in, q_descale=qd, k_descale=kd, v_descale=vd, causal=causal,
                                             config=dataclasses.replace(c, pv_flush=False, pv_halves=False))[1]
                assert torch.equal(halves_lse, plain_c), c.label()
        assert torch.equal(flush_lse, W.fp8_attention_ws(q, k, v_in, q_descale=qd, k_descale=kd, v_descale=vd,
                                                         causal=causal)[1])


@pytest.mark.gpu
@pytest.mark.hopper
@needs_gluon
def test_gpu_empty_inputs_give_what_the_triton_kernel_gives():
    """No queries, or no keys: zeros and -inf, before any TMA descriptor of a zero size is built."""
    gen = torch.Generator().manual_seed(9)
    for s_q, s_k in ((0, 64), (64, 0)):
        q, k, v = fp8(gen, 1, s_q, 2, 64, device="cuda"), fp8(gen, 1, s_k, 2, 64, device="cuda"), \
            fp8(gen, 1, s_k, 2, 64, device="cuda")
        want, want_lse = fp8_attention(q, k, v, return_lse=True)
        for v_in in (pretranspose_v(v), W.key_ordered_vt(v)):
            out, lse = W.fp8_attention_ws(q, k, v_in)
            assert torch.equal(out, want) and torch.equal(lse, want_lse), (s_q, s_k)


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


@pytest.mark.gpu
@pytest.mark.hopper
@needs_gluon
@pytest.mark.parametrize("d", [64, 128])
def test_gpu_three_consumers_give_the_same_bits(d):
    """FA3's 192-row tile (three consumer warpgroups) changes which rows share a CTA, not any row's
    arithmetic: a row's key blocks come in the same order, and a causal block that is all masked
    for it adds exact zeros. The same bits as two consumers, also with ragged and causal shapes."""
    gen = torch.Generator().manual_seed(d + 21)
    three = W.WsConfig(block_n=128 if d == 64 else 64, stages=3, pack_p=True, consumers=3)
    for (b, sq, sk, hq, hk), causal in (((2, 203, 208, 8, 2), False), ((2, 203, 208, 8, 2), True),
                                        ((1, 450, 77, 4, 4), True), ((1, 64, 300, 2, 1), False)):
        q, k, v = fp8(gen, b, sq, hq, d, device="cuda"), fp8(gen, b, sk, hk, d, device="cuda"), fp8(gen, b, sk, hk, d, device="cuda")
        qd, kd, vd = ((torch.rand(b, hk, generator=gen) * 0.4 + 0.05).cuda() for _ in range(3))
        kv = W.key_ordered_vt(v)
        out3, lse3 = W.fp8_attention_ws(q, k, kv, q_descale=qd, k_descale=kd, v_descale=vd, causal=causal, config=three)
        out2, lse2 = W.fp8_attention_ws(q, k, kv, q_descale=qd, k_descale=kd, v_descale=vd, causal=causal,
                                        config=dataclasses.replace(three, consumers=2))
        assert torch.equal(out3, out2) and torch.equal(lse3, lse2), (sq, sk, causal)
        emu = attention_fa3_fp8(q, k, v, qd, kd, vd, causal=causal, block_n=three.block_n)
        exact = attention_exact(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, causal=causal)
        assert rel_l2(out3, emu) <= 0.6 * rel_l2(emu, exact), (sq, sk, causal)


@pytest.mark.gpu
@pytest.mark.hopper
@needs_gluon
@pytest.mark.parametrize("d", [64, 128, 256])
def test_gpu_persistent_programs_give_the_same_bits(d):
    """With one program per SM (`persistent`) a program takes several tiles in turn, from a fixed
    list or (`dynamic`) from a counter, its K/V ring, Q buffers and ping-pong turns running on from
    one tile to the next; no tile's arithmetic changes, so the bits are those of one program per
    tile, launch after launch. Shapes with more tiles than SMs: causal tiles of every length, tiles
    with no key at all (more queries than keys, causal), ragged blocks, GQA."""
    gen = torch.Generator().manual_seed(d + 31)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for (b, sq, sk, hq, hk), causal in (((3, 1000, 1008, 16, 4), True), ((3, 1000, 1008, 16, 4), False),
                                        ((2, 1200, 304, 16, 16), True)):
        q, k, v = fp8(gen, b, sq, hq, d, device="cuda"), fp8(gen, b, sk, hk, d, device="cuda"), fp8(gen, b, sk, hk, d, device="cuda")
        qd, kd, vd = ((torch.rand(b, hk, generator=gen) * 0.4 + 0.05).cuda() for _ in range(3))
        plain = W.default_ws_config(d, causal)
        for cfg, vt in ((W.default_ws_config(d, causal, key_ordered=True), W.key_ordered_vt(v)),
                        (plain, pretranspose_v(v)), (dataclasses.replace(plain, pingpong=True), pretranspose_v(v))):
            assert -(-sq // cfg.block_m) * b * hq > sms  # several tiles per program
            one = W.fp8_attention_ws(q, k, vt, q_descale=qd, k_descale=kd, v_descale=vd, causal=causal,
                                     config=dataclasses.replace(cfg, persistent=False, dynamic=False))
            for run in range(2):  # the dynamic scheduler's counter is back at zero after each launch
                for dynamic in (False, True):
                    per = W.fp8_attention_ws(q, k, vt, q_descale=qd, k_descale=kd, v_descale=vd, causal=causal,
                                             config=dataclasses.replace(cfg, persistent=True, dynamic=dynamic))
                    assert torch.equal(per[0], one[0]) and torch.equal(per[1], one[1]), (sq, sk, causal, cfg.label(),
                                                                                          dynamic, run)
            assert W._tile_counter(q.device).tolist() == [0, 0]
        emu = attention_fa3_fp8(q, k, v, qd, kd, vd, causal=causal, block_n=cfg.block_n)
        exact = attention_exact(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, causal=causal)
        assert torch.isfinite(per[0]).all() and rel_l2(per[0], emu) <= 0.6 * rel_l2(emu, exact), (sq, sk, causal)


@pytest.mark.gpu
@pytest.mark.hopper
@needs_gluon
def test_gpu_dynamic_tiles_replay_in_a_cuda_graph():
    """The tile counter is left at zero by every launch, so a captured launch replays with the same
    bits, on the capture's stream, with no kernel to reset it."""
    gen = torch.Generator().manual_seed(37)
    b, s, h, d = 2, 2000, 8, 128
    q, k, v = (fp8(gen, b, s, h, d, device="cuda") for _ in range(3))
    qd, kd, vd = ((torch.rand(b, h, generator=gen) * 0.4 + 0.05).cuda() for _ in range(3))
    kv = W.key_ordered_vt(v)
    cfg = dataclasses.replace(W.default_ws_config(d, True, key_ordered=True), persistent=True, dynamic=True)
    call = lambda: W.fp8_attention_ws(q, k, kv, q_descale=qd, k_descale=kd, v_descale=vd, causal=True,  # noqa: E731
                                      config=cfg)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        want = call()  # warm-up: compiles, and allocates the stream's counter outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            got = call()
        for _ in range(3):
            graph.replay()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_ws_config_is_checked():
    assert W.WsConfig(consumers=3).block_m == 192 and W.WsConfig().block_m == 128
    assert W.WsConfig(consumers=3, pack_p=True).label() == "ws-n128s2-pw-c3"
    assert W.WsConfig(block_n=64, stages=4, persistent=True).label() == "ws-n64s4-ps"
    assert W.WsConfig(persistent=True, dynamic=True).label() == "ws-n128s2-ps-dy"
    with pytest.raises(ValueError, match="dynamic.*persistent=False"):
        W.WsConfig(dynamic=True)
    with pytest.raises(ValueError, match="consumers must be 2 or 3, got 4"):
        W.WsConfig(consumers=4)
    with pytest.raises(ValueError, match="pingpong"):
        W.WsConfig(consumers=3, pingpong=True)


def test_transpose_v_config_is_checked():
    """transpose_v (v30): stages of 128 keys; 4 transposer warps only beside two consumers (a fifth
    warpgroup's registers); its shared memory is the same tiles' without it (v31: V lands in V^T's stages)."""
    cfg = W.WsConfig(stages=3, pack_p=True, transpose_v=True)
    assert cfg.label() == "ws-n128s3-pw-tv2" and W.WsConfig(transpose_v=True, transposer_warps=4).label() == "ws-n128s2-tv4"
    assert cfg.smem_bytes(128) == (128 + 2 * 3 * 128) * 128 == W.WsConfig(stages=3).smem_bytes(128)
    with pytest.raises(ValueError, match="stages of 128 keys, got block_n=64"):
        W.WsConfig(block_n=64, transpose_v=True)
    for bad in (dict(transposer_warps=3), dict(transposer_warps=4, consumers=3)):
        with pytest.raises(ValueError, match="transposer_warps must be 2, or 4 with two consumers"):
            W.WsConfig(transpose_v=True, **bad)
    for d in (64, 128, 256):  # every default fits an SM's shared memory, the key-ordered tiles with V transposed
        for causal in (False, True):
            tv = W.default_ws_config(d, causal, transpose_v=True)
            keyed = W.default_ws_config(d, causal, key_ordered=True)
            assert tv.transpose_v and tv.pack_p and tv.smem_bytes(d) <= W.SMEM_LIMIT - 1024
            assert (tv.block_n, tv.persistent, tv.dynamic) == (keyed.block_n, keyed.persistent, keyed.dynamic)
    # v31: V lands in V^T's own stages, so the key-ordered tiles fit at every head dim
    assert W.default_ws_config(256, False, transpose_v=True) == dataclasses.replace(
        W.default_ws_config(256, False, key_ordered=True), transpose_v=True)


@needs_gluon
def test_transpose_v_bad_input_is_named():
    gen = torch.Generator().manual_seed(1)
    q, k, v = fp8(gen, 1, 64, 2, 64), fp8(gen, 1, 64, 2, 64), fp8(gen, 1, 64, 2, 64)
    with pytest.raises(ValueError, match="transpose_v takes V as it is stored"):
        W.fp8_attention_ws(q, k, W.key_ordered_vt(v), config=W.WsConfig(transpose_v=True))
    # four transposer warps leave the launch 128 registers, too few for head dim 256's wgmma (ptxas fails)
    four = W.WsConfig(block_n=128, stages=2, pack_p=True, transpose_v=True, transposer_warps=4)
    with pytest.raises(ValueError, match="four transposer warps do not build at head_dim 256"):
        W.compile_ws_sm90(256, False, four)


def _prmt(a: int, b: int, sel: int) -> int:
    """PTX prmt.b32 (default mode): byte i of the result is byte sel's nibble i of {b, a}."""
    pool = [(a >> 8 * i) & 0xFF for i in range(4)] + [(b >> 8 * i) & 0xFF for i in range(4)]
    out = 0
    for i in range(4):
        n = (sel >> 4 * i) & 0xF
        byte = pool[n & 7]
        out |= ((0xFF if byte & 0x80 else 0) if n & 8 else byte) << 8 * i
    return out


@needs_gluon
def test_transposer_turns_a_box_of_v_into_key_ordered_vt_rows():
    """The transposer's steps on one box of V (128 keys x 16 columns), run here as the kernel writes
    them (`_ws_box_columns`): 16-bit pairs read as `ldmatrix.trans` gives them, the two PRMTs of
    `_ws_pairs_transposed` (read from the kernel's source and run one at a time), the same reshapes
    and permutes (copied here: the GPU test runs the kernel's own), give the 16 rows of V^T that
    `key_ordered_vt` stores for those columns. A mutated selector fails it."""
    import inspect

    asm = "".join(re.findall(r'"([^"]*)"', inspect.getsource(W._ws_pairs_transposed.fn).split("gl.inline_asm")[1]))
    ops = re.findall(r"prmt\.b32 (\$\d), (\$\d), (\$\d), (0x[0-9a-f]+);", asm)
    assert len(ops) == 2

    def pairs_transposed(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # pack=2: consecutive int16 (the last dim) are one 32-bit register, element 0 low
        words = {"$2": a, "$3": b}
        words = {r: (t[..., 0].long() & 0xFFFF) | ((t[..., 1].long() & 0xFFFF) << 16) for r, t in words.items()}
        out = {}
        for dst, x, y, sel in ops:
            out[dst] = torch.tensor([_prmt(int(u), int(w), int(sel, 16))
                                     for u, w in zip(words[x].flatten(), words[y].flatten())]).reshape(words[x].shape)
        halves = [torch.stack([out[r] & 0xFFFF, out[r] >> 16], -1).to(torch.int32).to(torch.int16) for r in ("$0", "$1")]
        return halves[0], halves[1]

    gen = torch.Generator().manual_seed(31)
    v = fp8(gen, 1, 128, 1, 64)
    box_col = 2  # columns 32 .. 47
    box = v[0, :, 0, 16 * box_col: 16 * box_col + 16].contiguous().view(torch.int16)  # [key, pair]
    x = box.reshape(128 // 16, 2, 4, 2, 8).permute(0, 2, 4, 3, 1)  # as _ws_box_columns
    a, b = x[..., 0], x[..., 1]
    even, odd = pairs_transposed(a, b)
    y = torch.stack([even, odd], -1).permute(2, 4, 0, 1, 3).reshape(16, 128 // 2)
    want = W.key_ordered_vt(v).data[0, 0, 16 * box_col: 16 * box_col + 16].contiguous().view(torch.int16)
    assert torch.equal(y, want)
    # and the four keys a thread's pairs hold (2t, 2t + 1, 2t + 8, 2t + 9 of each 16) are the ones
    # key_ordered_vt stores at positions 4t .. 4t + 3
    keys = torch.arange(128, dtype=torch.uint8).reshape(1, 128, 1, 1).expand(1, 128, 1, 16).contiguous()
    order = W.key_ordered_vt(keys.view(torch.float8_e4m3fn)).data[0, 0, 0].view(torch.uint8).tolist()  # bytes = keys
    for group in range(0, 128, 16):
        for t in range(4):
            assert order[group + 4 * t: group + 4 * t + 4] == [group + k for k in (2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9)]


COMPILE_TV = """
import json, sys
from fp8lab.kernels import attention_ws as W
d = int(sys.argv[1])
cfg = W.default_ws_config(d, False, transpose_v=True)
k = W.compile_ws_sm90(d, False, cfg)
print(json.dumps(dict(ptx=k.asm["ptx"], shared=k.metadata.shared, label=cfg.label())))
"""


@needs_gluon
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_sm90_compile_of_transpose_v_reads_v_as_stored(head_dim):
    """transpose_v (v30, v31): V's stages come by 3-d TMA boxes (zeros past each sequence) into V^T's
    own stages, the transposer reads them with ldmatrix.trans, writes with stmatrix and keeps
    TRANSPOSER_REGS registers, and the shared memory is the key-ordered kernel's (no ring of V beside
    it); P reaches its MMA without shuffles, as with key_ordered_vt."""
    env = {key: val for key, val in os.environ.items() if key != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", COMPILE_TV, str(head_dim)], env=env, capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    k = json.loads(done.stdout.strip().splitlines()[-1])
    ptx, cfg = k["ptx"], W.default_ws_config(head_dim, False, transpose_v=True)
    assert "cp.async.bulk.tensor.3d" in ptx and "ldmatrix.sync.aligned.m8n8.x4.trans" in ptx and "stmatrix" in ptx
    assert re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+%d" % W.TRANSPOSER_REGS, ptx)
    assert re.search(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+%d" % cfg.consumer_regs, ptx)
    assert cfg.smem_bytes(head_dim) <= k["shared"] <= cfg.smem_bytes(head_dim) + 2048
    assert ptx.count("shfl.sync.idx") <= 1 + 2 * cfg.dynamic


@pytest.mark.gpu
@pytest.mark.hopper
@needs_gluon
@pytest.mark.parametrize("d", [64, 128, 256])
def test_gpu_transpose_v_gives_the_key_ordered_bits(d):
    """V as stored, transposed in shared memory by the kernel (v30, v31), writes the V^T that
    key_ordered_vt stores: the same bits, for ragged key counts (not multiples of 16 either), GQA, a
    strided V (2 of 4 kv heads), one program per tile or persistent, 2 or 4 transposer warps. NaN
    codes just past each sequence's keys do not reach its last key block (the 3-d box stops at its
    keys, and zeros fill the rest)."""
    gen = torch.Generator().manual_seed(d + 30)
    for (b, sq, sk), causal in (((2, 203, 333), False), ((2, 203, 333), True), ((1, 77, 1000), True)):
        q, k = fp8(gen, b, sq, 8, d, device="cuda"), fp8(gen, b, sk, 2, d, device="cuda")
        # V strided: 2 of 4 kv heads, and 128 keys of NaN codes after each sequence's own, which the
        # box must not read into its last key block
        v = fp8(gen, b, sk + 128, 4, d, device="cuda")[:, :, 1:3]
        v[:, sk:] = torch.tensor(float("nan")).to(torch.float8_e4m3fn)
        v = v[:, :sk]
        qd, kd, vd = ((torch.rand(b, 2, generator=gen) * 0.4 + 0.05).cuda() for _ in range(3))
        tv = W.default_ws_config(d, causal, transpose_v=True)
        configs = [tv, dataclasses.replace(tv, persistent=False, dynamic=False)]
        configs += [dataclasses.replace(tv, consumers=2, transposer_warps=6 - tv.transposer_warps)] * (d < 256)
        for cfg in configs:
            ref = W.fp8_attention_ws(q, k, W.key_ordered_vt(v.contiguous()), q_descale=qd, k_descale=kd,
                                     v_descale=vd, causal=causal, config=dataclasses.replace(cfg, transpose_v=False))
            got = W.fp8_attention_ws(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, causal=causal, config=cfg)
            assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1]), (sq, sk, causal, cfg.label())
        assert torch.isfinite(got[0]).all()
        emu = attention_fa3_fp8(q, k, v, qd, kd, vd, causal=causal, block_n=128)
        exact = attention_exact(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, causal=causal)
        assert rel_l2(got[0], emu) <= 0.6 * rel_l2(emu, exact)


def test_key_ordered_vt_stores_each_key_where_p_holds_it():
    """FP8 step 5 for the Gluon kernel: P's column c is relabelled to `key_order`(c) (the Triton
    kernel's own function, run here), so V^T's key c must sit at column key_order(c) of its 32;
    padding keys are zeros, and the PV product sums the same products."""
    from fp8lab.kernels.explain import key_order_values

    tau = key_order_values(32).long()  # tau(c) for c = 0..31
    gen = torch.Generator().manual_seed(3)
    for s_k in (64, 77, 208):
        v = fp8(gen, 2, s_k, 3, 16)
        kv = W.key_ordered_vt(v)
        s_pad = -(-s_k // 32) * 32
        assert kv.seqlen_k == s_k and kv.data.shape == (2, 3, 16, s_pad) and kv.data.is_contiguous()
        vt = torch.zeros(2, 3, 16, s_pad, dtype=v.dtype)
        vt[..., :s_k] = v.permute(0, 2, 3, 1)
        cols = (torch.arange(s_pad) // 32) * 32 + tau.repeat(s_pad // 32)  # where key c lands
        assert torch.equal(kv.data[..., cols].view(torch.uint8), vt.view(torch.uint8))
        assert torch.equal(W.key_ordered_vt(pretranspose_v(v)).data.view(torch.uint8), kv.data.view(torch.uint8))
        p = torch.randn(5, s_pad, generator=gen, dtype=torch.float64)
        p_relabelled = torch.empty_like(p)
        p_relabelled[:, cols] = p  # what the kernel's reshape/permute of P does, in registers
        assert torch.allclose(p_relabelled @ kv.data.double().transpose(-1, -2), p @ vt.double().transpose(-1, -2))


@needs_gluon
def test_key_ordered_vt_is_checked():
    gen = torch.Generator().manual_seed(4)
    q, k, v = fp8(gen, 1, 64, 2, 64), fp8(gen, 1, 64, 2, 64), fp8(gen, 1, 64, 2, 64)
    kv = W.key_ordered_vt(v)
    with pytest.raises(ValueError, match="key_ordered_vt"):
        W.fp8_attention_ws(q, k, W.KeyOrderedVt(kv.data, 20))  # not this V's seqlen_k
    with pytest.raises(ValueError, match="key_ordered_vt"):
        W.fp8_attention_ws(q, k, W.KeyOrderedVt(kv.data[..., :48], 40))  # not a multiple of 32 keys
    with pytest.raises(ValueError, match="seqlen"):
        W.fp8_attention_ws(q, k[:, :32], kv)  # K has 32 keys, V 64
    with pytest.raises(ValueError, match="batch, seqlen_k"):
        W.key_ordered_vt(v[0])
    with pytest.raises(TypeError, match="fp8_attention_ws"):  # the Triton kernel takes tensors only
        A.fp8_attention(q, k, kv)
    with pytest.raises(ValueError, match="key_ordered_vt"):  # packed P is in key order: plain V^T cannot take it
        W.fp8_attention_ws(q, k, pretranspose_v(v), config=W.WsConfig(block_n=128, stages=2, pack_p=True))


@pytest.mark.gpu
@pytest.mark.hopper
@needs_gluon
@pytest.mark.parametrize("d", [64, 128, 256])
def test_gpu_key_ordered_v_gives_the_same_attention(d):
    """With key-ordered V^T the same products meet in the PV MMA, in another order within each 32
    keys: within the GPU bound of the emulation, also where seqlen_k is not a multiple of 16 (the
    plain kernel's TMA cannot take that V^T; the padded copy can); and the same bits as the plain
    kernel, as the H200 gave in every check of run8 (the k=32 MMA's sum did not depend on the order)."""
    gen = torch.Generator().manual_seed(d + 5)
    for (b, sq, sk, hq, hk), causal in (((2, 203, 208, 8, 2), False), ((2, 203, 208, 8, 2), True),
                                        ((1, 150, 77, 4, 4), True), ((1, 64, 300, 2, 1), False)):
        q, k, v = fp8(gen, b, sq, hq, d, device="cuda"), fp8(gen, b, sk, hk, d, device="cuda"), fp8(gen, b, sk, hk, d, device="cuda")
        qd, kd, vd = ((torch.rand(b, hk, generator=gen) * 0.4 + 0.05).cuda() for _ in range(3))
        cfg = W.default_ws_config(d, causal, key_ordered=True)
        kv = W.key_ordered_vt(v)
        out, lse = W.fp8_attention_ws(q, k, kv, q_descale=qd, k_descale=kd, v_descale=vd,
                                      causal=causal)  # the key-ordered default: cfg
        emu, emu_lse = attention_fa3_fp8(q, k, v, qd, kd, vd, causal=causal, block_n=cfg.block_n, return_lse=True)
        exact = attention_exact(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, causal=causal)
        assert torch.isfinite(out).all()
        assert rel_l2(out, emu) <= 0.6 * rel_l2(emu, exact), (sq, sk, causal)
        assert torch.equal(torch.isinf(lse), torch.isinf(emu_lse))
        if sk % 16 == 0:
            plain, plain_lse = W.fp8_attention_ws(q, k, pretranspose_v(v), q_descale=qd, k_descale=kd, v_descale=vd,
                                                  causal=causal, config=dataclasses.replace(cfg, pack_p=False))
            assert torch.equal(lse, plain_lse) and torch.equal(out, plain), (sq, sk, causal)
        # P carried packed (pack_p): a change of representation only, the same bits as float32 P
        packed = [dataclasses.replace(cfg, pack_p=True)] + [W.WsConfig(block_n=64, stages=4, pack_p=True)] * (d == 256)
        for pcfg in packed:
            out_k, lse_k = W.fp8_attention_ws(q, k, kv, q_descale=qd, k_descale=kd, v_descale=vd,
                                              causal=causal, config=pcfg)
            out_f, lse_f = W.fp8_attention_ws(q, k, kv, q_descale=qd, k_descale=kd, v_descale=vd,
                                              causal=causal, config=dataclasses.replace(pcfg, pack_p=False))
            assert torch.equal(out_k, out_f) and torch.equal(lse_k, lse_f), (sq, sk, causal, pcfg.label())
            emu_k = attention_fa3_fp8(q, k, v, qd, kd, vd, causal=causal, block_n=pcfg.block_n)
            assert rel_l2(out_k, emu_k) <= 0.6 * rel_l2(emu_k, exact), (sq, sk, causal, pcfg.label())


def test_v24_records():
    """The API grid, the V copies and the API's cost, as the notes state them."""
    import pandas as pd

    from fp8lab.bench import load_results
    from fp8lab.kernels import explain

    rdir = ROOT / "results" / "h200"
    api = explain.v24_api_grid(rdir)
    assert len(api) == 18 and api.notna().all().all()
    assert api["API Gluon / API FA3"].between(0.82, 1.02).all()
    assert (api["Gluon direct / FA3 direct"] > 0.9).all()  # the same run's direct calls keep the line
    slower = api.index[api["API triton:triton"] > api["API triton (Gluon)"]]
    assert sorted(slower) == ["2x8192x32x64 causal", "4x4096x32x128 causal", "4x4096x32x64 causal"]
    rounds = pd.DataFrame([r for r in load_results(rdir / "bench_v24_api_rounds.json")["rows"] if "ms" in r])
    assert (rounds.groupby(["case", "provider"]).size() == 5).all() and rounds["provider"].nunique() == 6
    copies = explain.v24_v_layout(rdir)
    assert copies["same bytes"].all() and len(copies) == 12
    ours = copies[copies["op"].isin(["pretranspose_v", "key_ordered_vt"])]
    assert ours["TB/s (graph)"].between(2.8, 3.5).all()
    assert (copies[copies["op"].str.startswith("torch")]["TB/s (graph)"] < 0.4).all()
    cost = explain.api_overhead(rdir, "v24").set_index(["case", "variant"])["extra ms"]
    assert 0.2 < cost[("4x4096x32x64", "api triton:gluon")] < 0.35 and 0.1 < cost[("4x4096x32x64", "sync + ws")] < 0.2
    assert abs(cost[("1x16384x32x256", "api triton:gluon")]) < 0.3
    v27 = explain.api_overhead(rdir, "v27").set_index(["case", "variant"])["extra ms"].loc["4x4096x32x64"]
    assert abs(v27["prepared fa3:fa3-fwd"]) < 0.05 and abs(v27["prepared triton:gluon"] - v27["key_ordered_vt + ws"]) < 0.05
    assert 0.4 <= v27["api fa3:fa3-fwd"] < v27["api triton:gluon"] <= 0.6  # notebook 07 (g): "0.4-0.6 ms"


def test_v12_records_and_register_counts():
    """Notebook 09 (d), (e), (f): the recorded runs read back, and the register arithmetic behind them."""
    from fp8lab.kernels import explain

    rdir = ROOT / "results" / "h200"
    v12 = explain.v12_record(rdir)
    assert set(v12["kernel"]) == {"P in float32 (v11 default)", "P packed, v11's unpack",
                                  "P packed, words as the A operand (v12)", "Triton default"}
    assert v12["case"].nunique() == 8 and v12["ratio"].between(0.3, 1.5).all()
    assert explain.kernel_ratios(v12).shape == (8, 4)  # a case per row, a kernel per column
    c3 = explain.v12_consumers_record(rdir)
    assert c3["case"].nunique() == 6 and (c3["head_dim"] == 64).all() and c3["kernel"].nunique() == 3
    assert c3["ratio"].between(0.3, 1.5).all()
    r = explain.consumer_registers(256, 128)  # FA3's d=256 tile: over budget with float32 P, not packed
    assert r["o"] + r["s"] + r["p_float32"] > r["budget"] >= r["o"] + r["s"] + r["p_packed"]
    for run in (1, 2):  # v19: persistent programs against one program per tile, same run
        ps = explain.v19_persistent_record(rdir, run)
        assert ps["case"].nunique() == 18 and ps["ratio"].between(0.3, 1.5).all()
        assert {"one program per tile", "Triton default"} <= set(ps["kernel"]) and ps["kernel"].nunique() == 2 + run
    dy = explain.v20_dynamic_record(rdir)  # v20: fixed lists, the tile counter, one program per tile
    assert dy["case"].nunique() == 18 and dy["ratio"].between(0.3, 1.5).all()
    per_case = dy.groupby("case", sort=False)["kernel"].nunique()
    assert (per_case == dy.drop_duplicates("case").set_index("case")["causal"].map({False: 4, True: 5})).all()
    assert set(dy["head_dim"]) == {64, 128, 256}
    grids = explain.v21_causal_grids(rdir)  # v21: the counter for causal attention, two grids of each schedule
    assert grids.shape == (9, 2) and grids.notna().all().all() and grids.stack().between(0.3, 1.5).all()
    assert grids["counter"].mean() > grids["one program per tile"].mean()
    from fp8lab.bench import load_results
    for name, dynamic in (("bench_v20_grid", False), ("bench_v21_grid_run2", True), ("bench_v21_grid_run3", True),
                          ("bench_v21_grid_run4", True)):  # what each grid ran
        configs = {r["config"] for r in load_results(rdir / f"{name}.json")["rows"]
                   if r.get("provider") == "fp8lab ws" and r.get("causal")}
        assert configs and all(("-dy" in c) == dynamic for c in configs), (name, configs)
    import pandas as pd

    v23 = explain.v23_after_compile(rdir)  # the one-median grids, and v23's rounds
    assert len(v23) >= 18 and v23["ratio"].between(0.3, 1.5).all()
    rounds = v23[v23["before_s"].isna()]
    assert list(rounds["grid"]) == ["v23_grid", "v23_grid_run2", "v23_grid_run3", "v23_grid_run4"]
    assert (rounds["ratio"] >= 0.9).all() and rounds["method"].str.contains("no load first").sum() == 1
    since_v12 = v23[~v23["grid"].str.startswith(("v10_", "v11_"))]
    below = since_v12[since_v12["ratio"] < 0.9]
    assert len(below) == 5 and (below["before_s"] > 1.0).all()  # every miss came right after a compile
    window, span = explain.v23_swing(rdir)
    (start, end), = span.values()
    assert window["power_w"].iloc[0] < 250 and window["power_w"].max() > 650  # the step from idle
    assert window.loc[window["time"].between(start - pd.Timedelta(seconds=1), end), "sm_mhz"].min() < 1600
    for run, settle in (("", 1.5), ("_run2", 1.5), ("_run3", 0.0), ("_run4", 1.5)):  # v21's defaults, five rounds
        data = load_results(rdir / f"bench_v23_rounds{run}.json")
        assert data["meta"]["rounds"] == 5 and data["meta"]["settle_s"] == settle
        timed = pd.DataFrame([r for r in data["rows"] if "ms" in r])
        per = timed.groupby(["case", "provider"]).size()
        assert len(per) == 18 * 6 and (per == 5).all()
        assert (timed.groupby(["case", "round"])["position"].min() == 0).all()
        for (d, causal), cfgs in timed[timed["provider"] == "fp8lab ws"].groupby(["head_dim", "causal"])["config"]:
            assert set(cfgs) == {W.default_ws_config(d, causal, True).label() + "-kv"}
        grid = pd.DataFrame(load_results(rdir / f"bench_v23_grid{run}.json")["rows"])
        assert (grid["rounds"] == 5).all() and (grid["tflops_min"] <= grid["tflops"]).all()
    r3 = explain.consumer_registers(64, 128, consumers=3)
    assert r3["budget"] == W.WsConfig(consumers=3).consumer_regs == 160
    assert r3["o"] + r3["s"] + r3["p_float32"] >= r3["budget"] > r3["o"] + r3["s"] + r3["p_packed"]


@pytest.mark.gpu
@pytest.mark.hopper
@needs_gluon
def test_gpu_pv_halves_stay_flat_at_long_context():
    """Head dim 256 (v28): without the flush the error grows with the context as at 128; every pv_halves
    candidate, and the kernel's pv_flush default, stay at the fp32-accumulation error."""
    from fp8lab.data import make_qkv
    from fp8lab.reference import quantize_qkv

    q, k, v = make_qkv("normal", seqlen_q=16, seqlen_k=16384, heads_q=4, head_dim=256, seed=6, device="cuda")
    exact = attention_exact(q, k, v + 1.0)
    qq = quantize_qkv(q, k, v + 1.0)
    vk = W.key_ordered_vt(qq.v)
    fp32 = rel_l2(attention_fa3_fp8(qq.q, qq.k, qq.v, **qq.descales, block_n=128), exact)
    plain = rel_l2(W.fp8_attention_ws(qq.q, qq.k, vk, **qq.descales)[0], exact)
    assert plain > 20 * fp32
    for c in (*W.WS_PV_HALVES_CANDIDATES, W.default_ws_config(256, False, True, pv_flush=True)):
        assert rel_l2(W.fp8_attention_ws(qq.q, qq.k, vk, **qq.descales, config=c)[0], exact) < 1.5 * fp32, c.label()

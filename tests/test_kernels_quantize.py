"""fp8lab.kernels.quantize_fp8 / quantize_fp8_static and the in-kernel rounding helpers,
bit for bit against fp8lab.formats (the float64 reference)."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

from fp8lab.formats import cast_to_fp8, quantize, representable_values
import fp8lab.kernels.quantize as Q
import fp8lab.kernels.quantize_onchip as O
from fp8lab.kernels import quantize_fp8, quantize_fp8_static
from fp8lab.kernels.fp8_rounding import round_to_bf16, round_to_e4m3

DEV = "cuda" if torch.cuda.is_available() else "cpu"
ROOT = Path(__file__).resolve().parents[1]
ON_HOPPER = O.HAVE_GLUON and DEV == "cuda" and torch.cuda.get_device_capability() == (9, 0)


def skip_unless_runs(schedule: str) -> None:
    """The on-chip schedule is Gluon: it runs on an sm_90 GPU only (no interpreter)."""
    if schedule == "onchip" and not ON_HOPPER:
        pytest.skip("schedule='onchip' needs Gluon and an sm_90 GPU")


def bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.uint8).cpu()


def ieee_div(x: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """x / d correctly rounded in float32 (computed in float64: exact enough to round once)."""
    return (x.double() / d.double()).float()


def cast_ref(y: torch.Tensor) -> torch.Tensor:
    """e4m3 bits of float32 `y`, saturating, rounded by fp8lab.formats' float64 reference."""
    return bits(cast_to_fp8(y.cpu().double()))


def inputs(gen: torch.Generator, *shape: int, dtype=torch.bfloat16) -> torch.Tensor:
    x = torch.randn(*shape, generator=gen) * torch.rand(shape[-2], 1, generator=gen) * 10  # heads differ in range
    return x.to(dtype).to(DEV)


@pytest.fixture(params=["fused", "two-pass", "fused-lag-1", "fused-reversed", "onchip", "onchip-fallback",
                        "onchip-ws", "onchip-ws-fallback"])
def schedule(request, monkeypatch) -> str:
    """The per-head/per-tensor schedules. "fused-lag-1": the fused kernel casts each slice one
    slice after its amax, so amax and cast items interleave. "fused-reversed": its items run last
    to first, so every cast finds its amax items not run and takes the fallback. "onchip-fallback":
    the on-chip kernel does not wait for the table; every program reads its slice's amax from x.
    "onchip-ws": per head, the warp-specialized on-chip kernel at any size (it runs from
    WS_FROM_BYTES otherwise)."""
    if request.param == "fused-lag-1":
        monkeypatch.setattr(Q, "FUSED_LAG_BYTES", 1)
    if request.param == "fused-reversed":
        monkeypatch.setattr(Q, "_FUSED_REVERSED", True)
    if request.param.startswith("onchip-ws"):
        monkeypatch.setattr(O, "WS_FROM_BYTES", 0)
    if request.param.endswith("fallback") and request.param.startswith("onchip"):
        monkeypatch.setattr(O, "SPINS", 0)
    name = request.param.split("-")[0] if request.param.startswith(("fused", "onchip")) else request.param
    skip_unless_runs(name)
    return name


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_per_head_gqa_matches_reference(dtype, schedule):
    gen = torch.Generator().manual_seed(1)
    x = inputs(gen, 2, 37, 4, 64, dtype=dtype)
    x[0, 3, 1, 5] = -0.0  # keeps its sign bit (the GPU's two-FMA division once lost it)
    y, d = quantize_fp8(x, "head", heads_kv=2, schedule=schedule)  # Q under GQA: heads 2h, 2h+1 share kv head h
    amax = x.float().abs().reshape(2, 37, 2, 2, 64).amax(dim=(1, 3, 4))
    assert d.dtype == torch.float32 and d.shape == (2, 2)
    assert torch.equal(d.cpu(), ieee_div(amax.cpu(), torch.tensor(448.0)))
    assert torch.equal(bits(y), cast_ref(ieee_div(x.float(), d.repeat_interleave(2, 1)[:, None, :, None])))
    assert bits(y)[0, 3, 1, 5] == 0x80
    assert (y.float().abs().amax(dim=(1, 3)).reshape(2, 2, 2).amax(-1) == 448).all()  # each group reaches 448


def test_per_tensor_is_one_stride0_descale(schedule):
    gen = torch.Generator().manual_seed(2)
    x = inputs(gen, 3, 20, 2, 32)
    y, d = quantize_fp8(x, "tensor", schedule=schedule)
    assert d.shape == (3, 2) and d.stride() == (0, 0)
    d0 = ieee_div(x.float().abs().amax().reshape(1).cpu(), torch.tensor([448.0]))
    assert torch.equal(d[0, 0].reshape(1).cpu(), d0)
    assert torch.equal(bits(y), cast_ref(ieee_div(x.float().cpu(), d0)))


def test_per_token_one_pass_and_zero_rows():
    gen = torch.Generator().manual_seed(3)
    x = inputs(gen, 2, 21, 3, 48)  # head_dim 48 is padded to 64 inside the kernel
    x[1, 4, 2] = 0  # a zero row gets descale 1
    y, d = quantize_fp8(x, "token")
    dref = ieee_div(x.float().abs().amax(-1).cpu(), torch.tensor(448.0))
    dref[1, 4, 2] = 1.0
    assert d.shape == (2, 21, 3) and torch.equal(d.cpu(), dref)
    assert torch.equal(bits(y), cast_ref(ieee_div(x.float().cpu(), dref[..., None])))


def test_varlen_per_head_per_sequence(schedule):
    gen = torch.Generator().manual_seed(4)
    x = inputs(gen, 60, 2, 32)
    cu = torch.tensor([0, 10, 10, 60], dtype=torch.int32, device=DEV)  # the middle sequence is empty
    y, d = quantize_fp8(x, "head", cu_seqlens=cu, schedule=schedule)
    xf = x.float().cpu()
    amax = torch.stack([xf[:10].abs().amax((0, 2)), torch.zeros(2), xf[10:].abs().amax((0, 2))])
    dref = torch.where(amax > 0, ieee_div(amax, torch.tensor(448.0)), torch.ones_like(amax))
    assert torch.equal(d.cpu(), dref)
    per_token = torch.cat([dref[0].expand(10, 2), dref[2].expand(50, 2)])
    assert torch.equal(bits(y), cast_ref(ieee_div(xf, per_token[..., None])))
    yt, dt = quantize_fp8(x, "token", cu_seqlens=cu)
    assert dt.shape == (60, 2) and torch.equal(dt.cpu(), ieee_div(xf.abs().amax(-1), torch.tensor(448.0)))


def test_head_major_x_keeps_its_layout_and_bits(schedule):
    """v17: x (b, s, h, d) stored as (b, h, s, d), as `t.transpose(1, 2)` of PyTorch SDPA's layout,
    is quantized as its contiguous (sequence, kv head) slices: the same descales and bits as the
    token-major copy of x, with y head-major like x, at every granularity, with and without GQA."""
    gen = torch.Generator().manual_seed(21)
    x = inputs(gen, 2, 4, 37, 32).transpose(1, 2)  # (b, h, s, d) memory
    x[1, 5, 3, 7] = -0.0
    for granularity, heads_kv in (("head", 4), ("head", 2), ("head", 1), ("tensor", 2), ("token", 4)):
        y, d = quantize_fp8(x, granularity, heads_kv=heads_kv, schedule=schedule)
        y2, d2 = quantize_fp8(x.contiguous(), granularity, heads_kv=heads_kv, schedule=schedule)
        assert y.shape == x.shape and y.stride() == x.stride() and y.dtype == torch.float8_e4m3fn
        assert d.shape == d2.shape and torch.equal(d, d2) and torch.equal(bits(y), bits(y2)), (granularity, heads_kv)
        if granularity == "tensor":
            assert d.stride() == (0, 0)
    ys, ds = quantize_fp8_static(x, 0.0123, heads_kv=2)
    ys2, ds2 = quantize_fp8_static(x.contiguous(), 0.0123, heads_kv=2)
    assert ys.stride() == x.stride() and torch.equal(bits(ys), bits(ys2)) and torch.equal(ds, ds2)
    assert bits(y)[1, 5, 3, 7] == 0x80


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the interpreter's inf / inf
@pytest.mark.parametrize("granularity,schedule", [("head", "two-pass"), ("head", "fused"), ("head", "onchip"),
                                                  ("tensor", "two-pass"), ("tensor", "fused"), ("tensor", "onchip"),
                                                  ("token", "two-pass")])
def test_non_finite_inputs_stay_visible(granularity, schedule):
    """A NaN stays NaN (it used to saturate to -448, silently) and stays out of the amax (maxnum);
    an inf makes its slice's descale inf, so the slice's other values become 0 and the inf itself
    NaN: the bits of the float64 reference path, with e4m3fn's one NaN (0x7F) as the GPU gives it."""
    skip_unless_runs(schedule)
    gen = torch.Generator().manual_seed(10)
    x = inputs(gen, 2, 24, 4, 32)
    x[0, 3, 1, 5], x[1, 7, 2, 9] = float("nan"), float("inf")
    y, d = quantize_fp8(x, granularity, schedule=schedule)
    xf = x.float().cpu()
    mag = xf.nan_to_num(nan=0.0, posinf=float("inf"), neginf=float("inf")).abs()
    amax = {"head": mag.amax(dim=(1, 3)), "tensor": mag.amax().expand(2, 4), "token": mag.amax(-1)}[granularity]
    dref = torch.where(amax > 0, ieee_div(amax, torch.tensor(448.0)), torch.ones_like(amax))
    assert torch.equal(d.cpu(), dref)
    ref = cast_ref(ieee_div(xf, dref[..., None] if granularity == "token" else dref[:, None, :, None]))
    ref[(ref & 0x7F) == 0x7F] = 0x7F  # the reference keeps the sign of a NaN; e4m3fn's hardware NaN has none
    assert torch.equal(bits(y), ref)
    assert bits(y)[0, 3, 1, 5] == 0x7F and bits(y)[1, 7, 2, 9] == 0x7F


@pytest.mark.filterwarnings("ignore:All-NaN slice:RuntimeWarning")  # the interpreter's max of an all-NaN tile
@pytest.mark.parametrize("granularity,schedule", [("head", "two-pass"), ("head", "fused"), ("head", "onchip"),
                                                  ("tensor", "two-pass"), ("tensor", "fused"), ("tensor", "onchip"),
                                                  ("token", "two-pass")])
def test_all_nan_tiles_stay_out_of_the_amax(granularity, schedule):
    """A tile whose values of a slice are all NaN (its max is NaN) must not poison the slice's amax:
    the descale comes from the slice's numbers (1 when it has none), as in the float64 reference.
    The slices here span several tiles (200 tokens), and tokens 0-99 of one head are all NaN."""
    skip_unless_runs(schedule)
    gen = torch.Generator().manual_seed(12)
    x = inputs(gen, 2, 200, 4, 32)
    x[0, :100, 1, :] = float("nan")  # whole tiles of head 1, numbers after them
    x[1, :, 2, :] = float("nan")  # a slice with no number at all
    y, d = quantize_fp8(x, granularity, schedule=schedule)
    xf = x.float().cpu()
    mag = xf.nan_to_num(nan=0.0).abs()
    amax = {"head": mag.amax(dim=(1, 3)), "tensor": mag.amax().expand(2, 4), "token": mag.amax(-1)}[granularity]
    dref = torch.where(amax > 0, ieee_div(amax, torch.tensor(448.0)), torch.ones_like(amax))
    assert torch.equal(d.cpu(), dref)
    ref = cast_ref(ieee_div(xf, dref[..., None] if granularity == "token" else dref[:, None, :, None]))
    ref[(ref & 0x7F) == 0x7F] = 0x7F
    assert torch.equal(bits(y), ref)


def division_edges(gen: torch.Generator) -> torch.Tensor:
    """(2, 9, 2, 32) bf16, one (sequence, head) slice per hard case of x / descale:
    [0, :, 0]: every e4m3 rounding midpoint (both signs) times 1.75, with an amax of 784 in each
    token, so descale = 1.75 and x / descale lands exactly on the midpoints (ties to even);
    [0, :, 1]: an amax near 2^-98, descale below TINY_DESCALE (the kernels divide exactly);
    [1, :, 0]: descale near 2^-85, just above it (Markstein's residual close to underflow);
    [1, :, 1]: ordinary values with +-0 among them."""
    pos = representable_values(torch.float8_e4m3fn)
    pos = pos[pos >= 0]
    ties = ((pos[1:] + pos[:-1]) / 2 * 1.75)
    ties = torch.cat([ties, -ties, ties[:27]])  # 279 = 9 tokens x 31
    x = torch.empty(2, 9, 2, 32, dtype=torch.float64)
    x[0, :, 0, 0] = 784.0
    x[0, :, 0, 1:] = ties[torch.randperm(len(ties), generator=gen)].reshape(9, 31)
    x[0, :, 1] = torch.randn(9, 32, generator=gen, dtype=torch.float64) * 2.0 ** -100
    x[1, :, 0] = torch.randn(9, 32, generator=gen, dtype=torch.float64) * 2.0 ** -78
    x[1, :, 1] = torch.randn(9, 32, generator=gen, dtype=torch.float64)
    x[1, 2, 1, :4] = torch.tensor([0.0, -0.0, -0.0, 0.0])
    xb = x.to(torch.bfloat16)
    assert torch.equal(xb[0, :, 0].double(), x[0, :, 0])  # the ties are bf16 values
    return xb.to(DEV)


@pytest.mark.parametrize("granularity", ["head", "token"])
def test_division_is_correctly_rounded_at_the_edges(granularity, schedule):
    """Values whose x / descale is an exact e4m3 tie, descales too small for Markstein's correction
    (and one just above), and signed zeros: the bits of the float64 reference on every schedule."""
    if granularity == "token" and schedule != "two-pass":
        pytest.skip("per-token quantization has one schedule")
    gen = torch.Generator().manual_seed(11)
    x = division_edges(gen)
    y, d = quantize_fp8(x, granularity, schedule=schedule)
    xf = x.float().cpu()
    amax = xf.abs().amax(dim=(1, 3)) if granularity == "head" else xf.abs().amax(-1)
    dref = torch.where(amax > 0, ieee_div(amax, torch.tensor(448.0)), torch.ones_like(amax))
    assert torch.equal(d.cpu(), dref)
    per_slice = dref if granularity == "head" else dref.transpose(1, 2)  # (batch, heads[, tokens])
    assert (per_slice[0, 0] == 1.75).all() and (per_slice[0, 1] < 2.0 ** -90).all()
    assert (per_slice[1, 0] > 2.0 ** -90).all()
    assert torch.equal(bits(y), cast_ref(ieee_div(xf, dref[..., None] if granularity == "token"
                                                  else dref[:, None, :, None])))
    assert (bits(y)[1, 2, 1, :4] == torch.tensor([0x00, 0x80, 0x80, 0x00], dtype=torch.uint8)).all()


def test_static_matches_vllm_formula_and_saturates():
    gen = torch.Generator().manual_seed(5)
    x = inputs(gen, 2, 19, 4, 32)
    scale = 0.011  # small on purpose: some |x| / scale exceed 448 and must saturate, not become NaN
    y, d = quantize_fp8_static(x, scale, heads_kv=2)
    inv = torch.tensor(1.0, dtype=torch.float32) / torch.tensor(scale, dtype=torch.float32)
    ref = (x.float().cpu() * inv).clamp(-448, 448)
    assert (x.float().abs() / scale > 448).any()
    assert torch.equal(bits(y), cast_ref(ref))
    assert d.shape == (2, 2) and d.stride() == (0, 0) and d[0, 0].item() == pytest.approx(scale)
    y2, _ = quantize_fp8_static(x, torch.tensor([scale], device=DEV))
    assert torch.equal(bits(y2), bits(y))


@pytest.mark.parametrize(
    "call,exc,match",
    [
        (lambda x: quantize_fp8(x.int(), "head"), TypeError, "bfloat16"),
        (lambda x: quantize_fp8(x, "block"), ValueError, "granularity"),
        (lambda x: quantize_fp8(x, "head", schedule="one-pass"), ValueError, "schedule"),
        (lambda x: quantize_fp8(x, "head", heads_kv=3), ValueError, "heads_kv"),
        (lambda x: quantize_fp8(x, "head", schedule="onchip", round_in_fp32=True), ValueError, "onchip"),
        (lambda x: quantize_fp8(x[0], "head"), ValueError, "cu_seqlens"),
        (lambda x: quantize_fp8(x.transpose(-1, -2), "head"), ValueError, "contiguous"),
        (lambda x: quantize_fp8_static(x, 0.0), ValueError, "scale"),
        (lambda x: quantize_fp8_static(x, float("nan")), ValueError, "scale"),
        (lambda x: quantize_fp8_static(x, torch.ones(2, device=DEV)), ValueError, "one-element"),
        # a Python scale that float32 flushes to 0 or overflows: a descale of 0 would divide by zero
        (lambda x: quantize_fp8_static(x, 1e-50), ValueError, "float32's normal range"),
        (lambda x: quantize_fp8_static(x, 1e39), ValueError, "float32's normal range"),
        # a tensor scale read on the CPU likewise (a subnormal one made every 0 a NaN code)
        pytest.param(lambda x: quantize_fp8_static(x.cpu(), torch.tensor([1e-39])), ValueError,
                     "float32's normal range", marks=pytest.mark.skipif(DEV != "cpu", reason="CPU tensors")),
        (lambda x: quantize_fp8(x, "head", heads_kv=2.5), ValueError, "heads_kv: expected a positive int"),
        (lambda x: quantize_fp8(x, "head", heads_kv=True), ValueError, "heads_kv: expected a positive int"),
        (lambda x: quantize_fp8(x.tolist(), "head"), TypeError, "x: expected a torch.Tensor"),
        (lambda x: quantize_fp8(x[:, :, :0], "head"), ValueError, "at least one head and head_dim >= 1"),
        (lambda x: quantize_fp8(x[..., :0], "token"), ValueError, "at least one head and head_dim >= 1"),
        (lambda x: quantize_fp8_static(x[0, :, :, :0], 0.5, cu_seqlens=torch.tensor([0, 4], dtype=torch.int32,
                                                                                  device=DEV)), ValueError, "head_dim >= 1"),
        (lambda x: quantize_fp8(x.to("meta"), "head"), ValueError, "expected a CUDA tensor"),
        # cu_seqlens[:, 0] of a (batch + 1, 2) tensor: stride 2, which the kernels would misread
        (lambda x: quantize_fp8(x[0], "head", cu_seqlens=torch.tensor([[0, 0], [4, 4]], dtype=torch.int32,
                                                                      device=DEV)[:, 0]), ValueError, "contiguous"),
    ],
)
def test_bad_inputs(call, exc, match):
    x = torch.randn(1, 4, 4, 32, device=DEV, dtype=torch.bfloat16)
    with pytest.raises(exc, match=match):
        call(x)


@pytest.mark.parametrize("flag", ["no", 0, 1.0])
def test_round_in_fp32_must_be_a_bool(flag):
    """round_in_fp32="no" is truthy: it would take the float32 rounding path, not refuse it."""
    gen = torch.Generator().manual_seed(21)
    x = inputs(gen, 2, 13, 4, 32)
    calls = [lambda: quantize_fp8(x, "head", round_in_fp32=flag),
             lambda: quantize_fp8(x.transpose(1, 2).contiguous().transpose(1, 2), "tensor", round_in_fp32=flag),
             lambda: quantize_fp8_static(x, 0.011, round_in_fp32=flag),
             lambda: Q.quantize_fp8_delayed(x, torch.full((2, 4), 0.011, device=DEV), round_in_fp32=flag)]
    for call in calls:  # head-major x included: it takes a detour through a view
        with pytest.raises(TypeError, match=f"round_in_fp32: expected a bool, got {type(flag).__name__}"):
            call()


@triton.jit
def _round_kernel(X, Y, Z, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(X + offs)
    tl.store(Y + offs, round_to_e4m3(x))
    tl.store(Z + offs, round_to_bf16(x))


def test_rounding_helpers_are_round_to_nearest_even():
    """Every e4m3 grid point, every midpoint (ties), and values just off them, up to 448."""
    grid = representable_values("e4m3fn").float()
    grid = grid[grid.abs() <= 448]
    mids = (grid[1:] + grid[:-1]) / 2
    eps = torch.finfo(torch.float32).eps
    x = torch.cat([grid, mids, mids * (1 + eps), mids * (1 - eps), torch.tensor([-0.0, 2.0**-10, -(2.0**-10)])])
    x = torch.cat([x, torch.zeros(2048 - x.numel())])
    y, z = torch.empty_like(x), torch.empty_like(x)
    _round_kernel[(1,)](x.to(DEV), y_d := y.to(DEV), z_d := z.to(DEV), N=2048)
    assert torch.equal(y_d.cpu().view(torch.int32), quantize(x, "e4m3fn").view(torch.int32))  # signs of zero too
    assert torch.equal(z_d.cpu(), x.to(torch.bfloat16).float())


def assert_same_bits_as_two_pass(x: torch.Tensor, granularity: str, schedule: str, calls: int = 1, **args) -> None:
    """`calls` runs of `schedule` give two passes' descales and e4m3 bits."""
    y2, d2 = quantize_fp8(x, granularity, schedule="two-pass", **args)
    for _ in range(calls):
        y, d = quantize_fp8(x, granularity, schedule=schedule, **args)
        assert torch.equal(d, d2) and torch.equal(bits(y), bits(y2)), (tuple(x.shape), schedule, args)


@pytest.mark.gpu
@pytest.mark.parametrize("granularity", ["head", "tensor"])
@pytest.mark.parametrize("lag_bytes,reversed_", [(None, False), (1, False), (None, True)])
def test_fused_waits_hold_on_gpu(granularity, lag_bytes, reversed_, monkeypatch):
    """Thousands of programs, casts interleaved with amaxes (lag_bytes=1: one slice apart) or run
    before them (reversed): every cast must use its slice's final amax on every call (a race
    would give a stale descale, sometimes)."""
    monkeypatch.setattr(Q, "FUSED_LAG_BYTES", lag_bytes)
    monkeypatch.setattr(Q, "_FUSED_REVERSED", reversed_)
    gen = torch.Generator().manual_seed(7)
    x = inputs(gen, 3, 1000, 8, 128)
    cu = torch.tensor([0, 700, 1900, 3000], dtype=torch.int32, device=DEV)
    for args in [dict(heads_kv=4), dict(cu_seqlens=cu)]:
        xx = x.reshape(3000, 8, 128) if "cu_seqlens" in args else x
        assert_same_bits_as_two_pass(xx, granularity, "fused", 20, **args)


@pytest.mark.gpu
@pytest.mark.parametrize("granularity", ["head", "tensor"])
@pytest.mark.parametrize("spins", [None, 0])
@pytest.mark.parametrize("ws", [False, True])
def test_onchip_waits_hold_on_gpu(granularity, spins, ws, monkeypatch):
    """Parts dealt over every program in rounds (per head, heads_kv=4: 376 parts of 64 tokens x 2
    heads for 264 programs on an H200; ws: for 132 programs, each part handed from warp to warp), or
    one round holding all of x (per tensor), batched and varlen with ragged sequences: every call
    must give two passes' bits (a race would give a stale descale, sometimes). spins=0: every
    program takes the fallback. The last input's slices have 188 parts each: the warp-specialized
    kernel's waiter reads their table entries in one read of 256 (v16)."""
    skip_unless_runs("onchip")
    if spins is not None:
        monkeypatch.setattr(O, "SPINS", spins)
    if ws:
        monkeypatch.setattr(O, "WS_FROM_BYTES", 0)
    gen = torch.Generator().manual_seed(8)
    x = inputs(gen, 2, 3000, 8, 128)
    cu = torch.tensor([0, 700, 1900, 3000], dtype=torch.int32, device=DEV)
    xv = x.reshape(6000, 8, 128)[:3000]
    long = inputs(gen, 1, 24000, 2, 128)
    if ws:
        plan = O.onchip_plan(long, 1, 24000, 2, 128, 2, False, False)
        assert plan.parts == 188 and O._kernel_and_constants(plan, False, False)[1]["CHUNK"] == 256, plan
    for xx, args in [(x, dict(heads_kv=4)), (xv, dict(cu_seqlens=cu)), (xv, dict(cu_seqlens=cu, heads_kv=2)), (x, {}),
                     (long, {})]:
        assert_same_bits_as_two_pass(xx, granularity, "onchip", 20, **args)


@pytest.mark.gpu
@pytest.mark.parametrize("ws", [False, True])
def test_onchip_takes_head_major_x_on_gpu(ws, monkeypatch):
    """v17: head-major x on chip (its slices contiguous blocks, the plan of b x kv heads sequences
    of one head) gives the bits and descales of two passes over its token-major copy, y head-major;
    ws: the warp-specialized kernel. Slices of 1, 2 and 8 query heads; 3000 tokens leave short parts."""
    skip_unless_runs("onchip")
    if ws:
        monkeypatch.setattr(O, "WS_FROM_BYTES", 0)
    gen = torch.Generator().manual_seed(13)
    x = inputs(gen, 2, 8, 3000, 128).transpose(1, 2)
    for granularity, heads_kv in (("head", 8), ("head", 4), ("head", 1), ("tensor", 8)):
        y2, d2 = quantize_fp8(x.contiguous(), granularity, heads_kv=heads_kv, schedule="two-pass")
        for _ in range(5):
            y, d = quantize_fp8(x, granularity, heads_kv=heads_kv, schedule="onchip")
            assert y.stride() == x.stride() and torch.equal(d, d2) and torch.equal(bits(y), bits(y2)), heads_kv


@pytest.mark.gpu
@pytest.mark.parametrize("granularity", ["head", "tensor"])
@pytest.mark.parametrize("ws", [False, True])
def test_onchip_tiny_and_ragged_shapes(granularity, ws, monkeypatch):
    """schedule="onchip" must also take the smallest inputs: one token, one-token sequences in a
    varlen batch, a head_dim of 16, fp32, boxes of a few tokens (at least 128 bytes each: a 64-byte
    box crashed this test per tensor before v13's fix; it passes on the H200 since v14). ws: the
    warp-specialized kernel at these sizes too."""
    skip_unless_runs("onchip")
    if ws:
        monkeypatch.setattr(O, "WS_FROM_BYTES", 0)
    gen = torch.Generator().manual_seed(9)
    cu = torch.tensor([0, 1, 1, 4], dtype=torch.int32, device=DEV)
    cases = [(inputs(gen, 1, 1, 1, 16), {}), (inputs(gen, 2, 3, 4, 32), dict(heads_kv=2)),
             (inputs(gen, 4, 2, 64), dict(cu_seqlens=cu)), (inputs(gen, 1, 5, 2, 64, dtype=torch.float32), {})]
    for x, args in cases:
        assert_same_bits_as_two_pass(x, granularity, "onchip", **args)


@pytest.mark.gpu
@pytest.mark.parametrize("ws", [False, True])
def test_onchip_table_outlives_launches_and_graph_replays(ws, monkeypatch):
    """v15 never clears the table of part amaxes: each launch tags its entries. Launches of other
    sizes and values in between, and replays of a captured CUDA graph whose input changes between
    replays, must each give two passes' bits (an entry read across launches would give a stale
    descale)."""
    skip_unless_runs("onchip")
    if ws:
        monkeypatch.setattr(O, "WS_FROM_BYTES", 0)
    gen = torch.Generator().manual_seed(12)
    big, small = inputs(gen, 2, 3000, 8, 128), inputs(gen, 1, 700, 4, 64)
    for x, args in [(big, dict(heads_kv=4)), (small, {}), (big * 0.01, dict(heads_kv=4)), (small * 300, {}),
                    (big, {})]:
        for granularity in ("head", "tensor"):
            assert_same_bits_as_two_pass(x, granularity, "onchip", 2, **args)
    x = big.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        quantize_fp8(x, "head", heads_kv=4, schedule="onchip")  # compiled before the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            y, d = quantize_fp8(x, "head", heads_kv=4, schedule="onchip")
    torch.cuda.current_stream().wait_stream(stream)
    for scale in (1.0, 1e-3, 50.0, 1.0):
        x.copy_(big * scale)
        graph.replay()
        torch.cuda.synchronize()
        y2, d2 = quantize_fp8(x, "head", heads_kv=4, schedule="two-pass")
        assert torch.equal(d, d2) and torch.equal(bits(y), bits(y2)), scale


def test_onchip_tables_per_stream_kept_while_graphs_hold_them(monkeypatch):
    """The table cache's bookkeeping (no GPU: streams and capture state stood in for): one table per
    stream, grown when a launch needs more entries, the STREAMS_KEPT most recent streams kept, and
    a table used under a CUDA-graph capture kept alive after its stream falls out."""
    stream, capturing = [0], [False]
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: type("S", (), {"cuda_stream": stream[0]}))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    monkeypatch.setattr(O, "_TABLES", type(O._TABLES)())
    monkeypatch.setattr(O, "_CAPTURED", [])
    cpu = torch.device("cpu")
    first = O._table_and_ticket(cpu, 100)
    assert first[0].numel() >= 100 and not first[0].any() and first[1].tolist() == [0]
    assert O._table_and_ticket(cpu, 1000)[0] is first[0]  # the same stream: the same table
    grown = O._table_and_ticket(cpu, 5000)
    assert grown[0] is not first[0] and grown[0].numel() >= 5000
    capturing[0] = True
    assert O._table_and_ticket(cpu, 10)[0] is grown[0] and O._CAPTURED == [grown]
    capturing[0] = False
    for other in range(1, O.STREAMS_KEPT + 1):  # STREAMS_KEPT other streams: stream 0 falls out
        stream[0] = other
        assert O._table_and_ticket(cpu, 10)[0] is not grown[0]
    assert len(O._TABLES) == O.STREAMS_KEPT and O._CAPTURED == [grown]
    stream[0] = 0
    assert O._table_and_ticket(cpu, 10)[0] is not grown[0]  # a new, zeroed table for stream 0


def meta(*shape: int, dtype=torch.bfloat16) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


@pytest.mark.skipif(not O.HAVE_GLUON, reason="this triton has no Gluon")
def test_onchip_plan_holds_what_fits_and_says_what_does_not():
    """Planned for an H200's 132 SMs: per head a (sequence, kv head) slice must fit in the SMs'
    shared memory (at most (lead + 1) parts per program at a time), per tensor all of x; per head
    the programs are a multiple of a slice's parts where that idles at most 1/16 of them."""
    for heads, ws in ((32, O.WS), (8, False)):  # 128 MiB: warp-specialized from WS_FROM_BYTES (v15); 32 MiB
        plan = O.onchip_plan(meta(1, 16384, heads, 128), 1, 16384, heads, 128, heads, False, False, sms=132)
        assert isinstance(plan, O.OnchipPlan) and plan.ws == ws
        rows = O.PART_BYTES // (128 * 2)  # one part: PART_BYTES of one head's tokens
        assert (plan.part_rows, plan.parts, plan.items) == (rows, 16384 // rows, heads * 16384 // rows)
        ctas, buffers = (O.WS_CTAS_PER_SM, O.WS_BUFFERS) if ws else (O.CTAS_PER_SM, O.BUFFERS)
        programs = 132 * ctas
        aligned = programs // plan.parts * plan.parts  # ALIGN: each round of parts covers whole slices (v14)
        assert plan.grid == (aligned if O.ALIGN and aligned * 16 >= programs * 15 else programs), plan
        assert plan.lead < plan.buffers == buffers and plan.lead == (buffers - 1 if ws else O.LEAD)
        assert plan.parts <= plan.grid * (plan.lead + 1)  # a slice's parts are held at once (module doc)
        assert plan.smem_bytes(2) == buffers * O.PART_BYTES and ctas * plan.smem_bytes(2) <= O.SMEM_BYTES
        assert plan.warps == (O.WS_WARPS if ws else O.WARPS)  # warp-specialized: WS_WARPS cast warps (v22)
        threads = 128 * -(-(plan.warps + 3) // 4) if ws else 32 * plan.warps  # WS: whole warpgroups
        assert plan.maxnreg * threads * ctas <= 65536  # every program resident
    for seqlen, heads, heads_kv, parts, chunk in ((16384, 32, 32, 128, 128), (32768, 16, 16, 256, 256),
                                                  (16384, 32, 16, 256, 256), (16384, 32, 8, 512, 128)):
        # v16: the WS waiter reads a slice of 129-256 parts' table entries at once, others 128 at a time (v15's)
        plan = O.onchip_plan(meta(1, seqlen, heads, 128), 1, seqlen, heads, 128, heads_kv, False, False, sms=132)
        const = O._kernel_and_constants(plan, False, False)[1]
        assert plan.ws and plan.parts == parts and const["CHUNK"] == chunk, (plan, const)
    gqa = O.onchip_plan(meta(2, 1000, 8, 64), 2, 1000, 8, 64, 2, False, False, sms=132)  # 4 query heads per part
    assert isinstance(gqa, O.OnchipPlan) and gqa.group == 4 and gqa.part_rows * 4 * 64 * 2 <= O.GROUP_PART_BYTES
    assert gqa.parts == -(-1000 // gqa.part_rows) and gqa.items == 2 * 2 * gqa.parts
    for heads_kv, wide in ((2, True), (4, False)):  # v17: from GROUP_FROM query heads per part, GROUP_* parts
        plan = O.onchip_plan(meta(1, 16384, 8, 128), 1, 16384, 8, 128, heads_kv, False, False, sms=132)
        part = O.GROUP_PART_BYTES if wide else O.PART_BYTES
        assert (plan.part_rows * plan.group * 128 * 2, plan.warps) == (part, O.GROUP_WARPS if wide else O.WARPS)
        assert plan.grid <= 132 * (1 if wide else O.CTAS_PER_SM) and not plan.ws
        assert plan.maxnreg * 32 * plan.warps * (1 if wide else O.CTAS_PER_SM) <= 65536
    for seqlen, parts, grid in ((12800, 100, 264), (8448, 66, 264)):  # 200 of 264 would idle too many
        odd = O.onchip_plan(meta(1, seqlen, 8, 128), 1, seqlen, 8, 128, 8, False, False, sms=132)
        assert (odd.parts, odd.grid) == (parts, grid)
    for x, args in [(meta(1, 1, 1, 16), (1, 1, 1, 16, 1)), (meta(2, 3, 4, 32), (2, 3, 4, 32, 2))]:
        for per_tensor in (False, True):  # tiny inputs: TMA boxes still fill 128-byte multiples
            tiny = O.onchip_plan(x, *args, per_tensor, False, sms=132)
            assert tiny.box_rows * tiny.head_dim * 2 % 128 == 0, tiny
    tensor = O.onchip_plan(meta(1, 16384, 4, 128), 1, 16384, 4, 128, 4, True, False, sms=132)  # 16 MiB
    assert isinstance(tensor, O.OnchipPlan) and tensor.items <= 132 and tensor.buffers == 1
    assert tensor.part_rows * tensor.parts >= 16384 and tensor.smem_bytes(2) <= O.SMEM_BYTES
    for x, args, words in [
        (meta(1, 131072, 8, 128), (1, 131072, 8, 128, 8, False, False), "does not fit"),  # a 32 MiB slice
        (meta(1, 16384, 8, 128), (1, 16384, 8, 128, 8, True, False), "does not fit"),  # 32 MiB per tensor
        (meta(1, 64, 8, 96), (1, 64, 8, 96, 8, False, False), "power of two"),
        (meta(1, 64, 128, 8).transpose(2, 3), (1, 64, 8, 128, 8, False, False), "rows of"),
    ]:
        why = O.onchip_plan(x, *args, sms=132)
        assert isinstance(why, str) and words in why, why


def test_auto_takes_onchip_from_4_mib_where_it_runs(monkeypatch):
    """schedule="auto" (v14's measurements): the on-chip kernel for x of 4 MiB or more, per head
    and per tensor, wherever it can run; two passes below that and where x does not fit on chip.
    Only the choice is tested here: the plan is made for an H200's 132 SMs, and neither kernel
    is launched."""
    calls = []

    class NoLaunch:
        def __getitem__(self, grid):
            raise AssertionError("two passes were chosen")

    monkeypatch.setattr(Q, "onchip_plan", lambda x, *args: O.onchip_plan(x, *args, sms=132))
    monkeypatch.setattr(Q, "quantize_onchip", lambda x, y, *args: calls.append(tuple(x.shape)) or (y, None))
    monkeypatch.setattr(Q, "_amax_kernel", NoLaunch())
    x = torch.zeros(1, 4096, 16, 128, dtype=torch.bfloat16, device=DEV)  # 16 MiB
    for granularity, view in [("head", x), ("tensor", x), ("head", x[:, :1024])]:  # 16, 16, 4 MiB
        quantize_fp8(view, granularity, round_in_fp32=False)
    assert calls == [(1, 4096, 16, 128), (1, 4096, 16, 128), (1, 1024, 16, 128)]
    wide = torch.zeros(1, 8192, 16, 128, dtype=torch.bfloat16, device=DEV)  # 32 MiB: per tensor, not on chip
    for view, granularity in [(x[:, :512], "head"), (wide, "tensor")]:  # 2 MiB; 32 MiB per tensor
        with pytest.raises(AssertionError, match="two passes"):
            quantize_fp8(view, granularity, round_in_fp32=False)
    assert len(calls) == 3


def test_onchip_says_why_it_cannot_run_here():
    x = torch.randn(1, 16, 2, 64, dtype=torch.bfloat16, device=DEV)
    if ON_HOPPER:
        x = torch.randn(1, 16, 2, 96, dtype=torch.bfloat16, device=DEV)  # head_dim 96: not a TMA power of two
    with pytest.raises(ValueError, match="onchip"):
        quantize_fp8(x, "head", schedule="onchip")
    y, d = quantize_fp8(x, "head")  # "auto" falls back to two passes
    assert torch.equal(bits(y), bits(quantize_fp8(x, "head", schedule="two-pass")[0]))


def selects_in(ptx: str, fn) -> int:
    """How many selp.f32 of `ptx` its line info places in `fn`'s source lines (inlined or not)."""
    lines, first = inspect.getsourcelines(fn)
    path = os.path.basename(inspect.getsourcefile(fn))
    files = {m.group(1): m.group(2) for m in re.finditer(r'^\s*\.file\s+(\d+)\s+"([^"]+)"', ptx, re.M)}
    here, count = False, 0
    for line in ptx.splitlines():
        loc = re.match(r"\s*\.loc\s+(\d+)\s+(\d+)", line)
        if loc:
            here = (os.path.basename(files.get(loc.group(1), "")) == path
                    and first <= int(loc.group(2)) < first + len(lines))
        count += here and "selp.f32" in line
    return count


COMPILE = """
import json, sys
from fp8lab.kernels import quantize_onchip as O
k = O.compile_onchip_sm90(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4], int(sys.argv[5]),
                          int(sys.argv[6]))
print(json.dumps(dict(ptx=k.asm["ptx"], shared=k.metadata.shared)))
"""


@pytest.mark.skipif(not O.HAVE_GLUON, reason="this triton has no Gluon")
@pytest.mark.parametrize("head_dim,group,per_tensor,dtype,seqlen,heads_kv", [(128, 1, False, "bf16", 16384, 1),
                                                                              (64, 4, False, "fp16", 2048, 1),
                                                                              (128, 1, True, "bf16", 16384, 1),
                                                                              (128, 4, False, "bf16", 16384, 8)])
def test_onchip_sm90_compile_reads_once_and_stores_wide(head_dim, group, per_tensor, dtype, seqlen, heads_kv):
    """The sm_90 build (no GPU needed): parts arrive by TMA into shared memory, which holds every
    buffer; the cast stores `vec` e4m3 per thread and instruction, with the hardware's saturating cvt.
    From 64 MiB per head (the last case, 128 MiB) the warp-specialized build: its cast warps sync
    among themselves only (a named barrier of their 128 threads), and registers move to them."""
    env = {key: val for key, val in os.environ.items() if key != "TRITON_INTERPRET"}  # Gluon has no interpreter
    args = [str(head_dim), str(group), str(int(per_tensor)), dtype, str(seqlen), str(heads_kv)]
    done = subprocess.run([sys.executable, "-c", COMPILE, *args], env=env,
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    k = json.loads(done.stdout.strip().splitlines()[-1])
    ptx = k["ptx"]
    assert "cp.async.bulk.tensor" in ptx and "mbarrier.try_wait" in ptx
    plan = O.onchip_plan(meta(1, seqlen, group * heads_kv, head_dim,
                              dtype={"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]),
                         1, seqlen, group * heads_kv, head_dim, heads_kv, per_tensor, False, sms=O.SM90_SMS)
    assert plan.ws == (O.WS and heads_kv == 8)
    assert plan.smem_bytes(2) <= k["shared"] <= plan.smem_bytes(2) + 4096 <= 227 << 10
    assert f"st.global.v{plan.vec // 4}.b32" in ptx and "cvt.rn.satfinite.e4m3x2.f32" in ptx  # vec e4m3 per store
    # bf16: two values per max (v14); the division: two fma per value and no compare and select (v13 had one)
    assert plan.pairs == (dtype == "bf16") and ("max.xorsign.abs.bf16x2" in ptx) == plan.pairs
    assert ptx.count("fma.rn.f32") >= 2 * 8
    assert not selects_in(ptx, O._divide.fn) and not selects_in(ptx, O._cast_part.fn)  # v13: one per value
    if plan.ws:  # one CTA-wide barrier (bar.sync 0 of all threads) would stall every partition
        assert f"bar.sync \t0, {32 * plan.warps};" in ptx and "bar.sync \t0;" not in ptx and "setmaxnreg.dec" in ptx


def test_v22_profile_of_one_against_four_sequences():
    """Notebook 07: Nsight Compute's record of the warp-specialized kernel (run18/call3) read back.
    Every shape reads x from DRAM once; one sequence takes longer with the same DRAM busy cycles,
    polls the table about as often per part, and waits longer for its parts to land."""
    from fp8lab.kernels import explain

    prof = explain.v22_quant_profile(ROOT / "results" / "h200")
    assert list(prof.columns) == list(explain.PROFILED_QUANT_SHAPES)
    x_mb = 16384 * 32 * 128 * 2 / 1e6
    assert prof.loc["DRAM read (MB)"].between(x_mb, 1.002 * x_mb).all()
    busy = prof.loc["DRAM busy cycles (thousands per channel)"]
    assert busy.max() < 1.01 * busy.min()
    time = prof.loc["kernel time under ncu (us)"]
    assert time["token-1x16384"] > 1.04 * time["token-4x4096"] and time["token-1x16384"] > time["head-1x16384"]
    one, four = prof["token-1x16384"], prof["token-4x4096"]
    assert abs(one["table reads per part"] / four["table reads per part"] - 1) < 0.1
    land = "try-waits per wait for a part to land (amax, waiter)"
    assert one[land] > 1.4 * four[land]
    hand = "try-waits per wait for a hand-over (cast warps)"
    assert one[hand] > 1.2 * four[hand]


@pytest.mark.parametrize("varlen", [False, True])
def test_more_sequences_than_grid_axis_1_holds_take_one_flat_axis(monkeypatch, varlen):
    """More than 65535 sequences do not fit grid axis 1: the kernels then take one flat axis (a division per
    program, 2-5 % slower where it was measured, so only then), with the same bits in every schedule."""
    gen = torch.Generator().manual_seed(77)
    x = (torch.randn(5, 37, 4, 32, generator=gen) * 3).to(DEV, torch.bfloat16)
    kw = {}
    if varlen:
        x, kw = x.reshape(185, 4, 32), dict(cu_seqlens=torch.tensor([0, 30, 30, 101, 185], dtype=torch.int32, device=DEV))
    calls = [lambda: quantize_fp8(x, "head", heads_kv=2, schedule="two-pass", **kw),
             lambda: quantize_fp8(x, "tensor", schedule="two-pass", **kw),
             lambda: quantize_fp8(x, "token", **kw),
             lambda: quantize_fp8_static(x, 0.0173, **kw)]
    want = [c() for c in calls]
    monkeypatch.setattr(Q, "GRID_Y_MAX", 2)
    for c, (y0, d0) in zip(calls, want):
        y, d = c()
        assert torch.equal(bits(y), bits(y0)) and torch.equal(d.cpu(), d0.cpu())

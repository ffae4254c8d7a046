"""V stored keys-contiguous by the Triton kernel (`transpose_keys`): the same bytes as torch's copies.

Runs on the GPU where there is one, else in Triton's interpreter (tests/conftest.py)."""

from __future__ import annotations

import pytest
import torch

from fp8lab.kernels import key_ordered_vt, pretranspose_v
from fp8lab.kernels.explain import key_order_values
from fp8lab.kernels.vlayout import transpose_keys

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def fp8(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return (torch.randn(*shape, generator=gen) * 60).to(torch.float8_e4m3fn)  # every exponent, some saturated


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8).cpu()


@pytest.mark.parametrize("b, s, h, d", [(2, 77, 3, 64), (1, 64, 2, 128), (1, 130, 1, 256), (2, 33, 2, 96),
                                        (1, 5, 2, 16)])
def test_transpose_keys_moves_every_byte_where_torch_does(b, s, h, d):
    gen = torch.Generator().manual_seed(b * 1000 + s + d)
    wide = fp8(gen, b, s, h + 2, d)
    for v in (wide[:, :, 1:h + 1], wide[:, :, :h].contiguous()):  # a strided slice, and contiguous
        want = v.permute(0, 2, 3, 1)  # (b, h, d, s)
        got = transpose_keys(v.to(DEVICE), s + 3)
        assert got.shape == (b, h, d, s + 3) and got.is_contiguous() and got.dtype == v.dtype
        assert torch.equal(as_bytes(got)[..., :s], as_bytes(want)) and not as_bytes(got)[..., s:].any()
        s_pad = -(-s // 32) * 32
        keyed = as_bytes(transpose_keys(v.to(DEVICE), s_pad, key_ordered=True))
        cols = (torch.arange(s_pad) // 32) * 32 + key_order_values(32).long().repeat(s_pad // 32)
        padded = torch.zeros(b, h, d, s_pad, dtype=torch.uint8)
        padded[..., :s] = as_bytes(want)
        assert torch.equal(keyed[..., cols], padded)  # key c sits at column key_order(c); padding zeros


def test_pretranspose_v_and_key_ordered_vt_give_torch_bytes_on_this_device():
    """On a GPU both layouts come from `transpose_keys`; on the CPU from torch: same bytes, same strides,
    and (on any device, the interpreter's on a CPU) the bytes `transpose_keys` writes."""
    gen = torch.Generator().manual_seed(9)
    for v in (fp8(gen, 2, 77, 3, 64), fp8(gen, 150, 2, 128)):  # batched and varlen (total, h, d)
        cpu, dev = pretranspose_v(v), pretranspose_v(v.to(DEVICE))
        assert dev.shape == cpu.shape == v.shape and dev.stride() == cpu.stride()
        assert cpu.stride(-3) == 1 and torch.equal(as_bytes(cpu), as_bytes(v))  # V's values, keys contiguous
        assert torch.equal(as_bytes(dev), as_bytes(cpu))
        v4 = v if v.dim() == 4 else v[None]
        s = v4.shape[1]
        kernel = as_bytes(transpose_keys(v4.to(DEVICE), s))  # (b, h, d, s)
        stored = cpu.permute(0, 2, 3, 1) if v.dim() == 4 else cpu.permute(1, 2, 0)[None]
        assert torch.equal(as_bytes(stored), kernel)
    v = fp8(gen, 2, 77, 3, 64)
    cpu, dev = key_ordered_vt(v), key_ordered_vt(v.to(DEVICE))
    assert dev.seqlen_k == cpu.seqlen_k == 77 and torch.equal(as_bytes(dev.data), as_bytes(cpu.data))
    assert torch.equal(as_bytes(cpu.data), as_bytes(transpose_keys(v.to(DEVICE), 96, key_ordered=True)))


def test_transpose_keys_says_what_it_expected():
    gen = torch.Generator().manual_seed(1)
    v = fp8(gen, 1, 40, 2, 64)
    with pytest.raises(ValueError, match="one-byte elements"):
        transpose_keys(v.to(torch.bfloat16), 40)
    with pytest.raises(ValueError, match="head_dim contiguous"):
        transpose_keys(v.transpose(1, 3), 64)
    with pytest.raises(ValueError, match="multiple of 32"):
        transpose_keys(v, 48, key_ordered=True)
    with pytest.raises(ValueError, match=">= 40"):
        transpose_keys(v, 32)


def test_more_pairs_than_grid_axis_1_holds_take_one_flat_axis(monkeypatch):
    """More than 65535 (batch, head) pairs do not fit grid axis 1: they go on axis 0, the same bytes."""
    import fp8lab.kernels.vlayout as L

    gen = torch.Generator().manual_seed(9)
    v = (torch.randn(3, 70, 5, 64, generator=gen) * 60).to(torch.float8_e4m3fn).to(DEVICE)
    want = transpose_keys(v, 96, key_ordered=True)
    monkeypatch.setattr(L, "GRID_Y_MAX", 4)  # 15 pairs: flat
    assert torch.equal(transpose_keys(v, 96, key_ordered=True).view(torch.uint8), want.view(torch.uint8))

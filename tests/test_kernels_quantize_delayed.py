"""fp8lab.kernels.quantize_fp8_delayed: a cast with a known descale and x's amax in one pass, bit for bit
against fp8lab.scaling's float64 reference; and quantize_delayed, which drives `DelayedAmax` with it exactly as
`fp8lab.scaling.quantize` does."""

from __future__ import annotations

import pytest
import torch

import fp8lab.kernels.quantize as Q
from fp8lab.kernels import quantize_delayed, quantize_fp8_delayed
from fp8lab.scaling import DelayedAmax, PerChannel, PerHead, PerTensor, ScaleStrategy, quantize
from fp8lab.scaling.strategy import quantize_with_descale

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.uint8).cpu()


def inputs(gen: torch.Generator, *shape: int, dtype=torch.bfloat16) -> torch.Tensor:
    x = torch.randn(*shape, generator=gen) * torch.rand(shape[-2], 1, generator=gen) * 10  # heads differ in range
    return x.to(dtype).to(DEV)


def reference(x: torch.Tensor, descale: torch.Tensor, heads_kv: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 bits, float32 amax (batch, heads_kv)) of a batched x, by fp8lab.scaling in float64."""
    b, s, h, d = x.shape
    y = quantize_with_descale(x.cpu(), descale.cpu().contiguous(), PerHead(heads_kv))
    rows = x.cpu().double().abs().reshape(b, s, heads_kv, h // heads_kv, d).permute(0, 2, 1, 3, 4).reshape(b, heads_kv, -1)
    amax = (rows.amax(-1) if rows.shape[-1] else torch.zeros(b, heads_kv, dtype=torch.float64)).float()
    return bits(y), amax


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("heads_kv", [4, 2, 1])
def test_matches_the_reference_per_head_and_gqa(dtype, heads_kv):
    """Descales that differ per (sequence, kv head), small enough that some values saturate."""
    gen = torch.Generator().manual_seed(heads_kv)
    x = inputs(gen, 3, 21, 4, 32, dtype=dtype)
    descale = (torch.rand(3, heads_kv, generator=gen) * 0.02 + 0.004).to(DEV)
    y, amax = quantize_fp8_delayed(x, descale, heads_kv=heads_kv)
    y_ref, amax_ref = reference(x, descale, heads_kv)
    assert (x.float().abs().amax() / descale.min() > 448).item()  # saturation is exercised
    assert y.dtype == torch.float8_e4m3fn and y.shape == x.shape
    assert torch.equal(bits(y), y_ref)
    assert amax.dtype == torch.float32 and torch.equal(amax.cpu(), amax_ref)


def test_stride0_descale_gives_the_materialized_bits():
    """A per-tensor descale expanded with stride 0 and the same values stored per head agree; a
    per-head descale with distinct values differs from both (the index is the kv head's); distinct
    values in other strides give the bits of the same values contiguous."""
    gen = torch.Generator().manual_seed(3)
    x = inputs(gen, 2, 17, 4, 32)
    one = torch.tensor([[0.0117]], device=DEV)
    y0, a0 = quantize_fp8_delayed(x, one.expand(2, 2), heads_kv=2)
    y1, a1 = quantize_fp8_delayed(x, one.expand(2, 2).contiguous(), heads_kv=2)
    assert torch.equal(bits(y0), bits(y1)) and torch.equal(a0, a1)
    per_head = torch.tensor([[0.0117, 0.031], [0.0117, 0.031]], device=DEV)
    y2, _ = quantize_fp8_delayed(x, per_head, heads_kv=2)
    assert torch.equal(bits(y2)[:, :, :2], bits(y0)[:, :, :2]) and not torch.equal(bits(y2)[:, :, 2:], bits(y0)[:, :, 2:])
    assert torch.equal(bits(y2), reference(x, per_head, 2)[0])
    # distinct values per (sequence, kv head) in a column-major copy, and a per-head row expanded over
    # the batch (strides (0, 1)): the bits of the same values contiguous, and of the reference
    table = (torch.rand(2, 2, generator=gen) * 0.02 + 0.004).to(DEV)
    row = (torch.rand(1, 2, generator=gen) * 0.02 + 0.004).to(DEV).expand(2, 2)
    for d in (table.t().contiguous().t(), row):
        assert d.stride() in ((1, 2), (0, 1)) and len(d.unique()) > 1
        y3, a3 = quantize_fp8_delayed(x, d, heads_kv=2)
        y4, a4 = quantize_fp8_delayed(x, d.contiguous(), heads_kv=2)
        assert torch.equal(bits(y3), bits(y4)) and torch.equal(a3, a4)
        assert torch.equal(bits(y3), reference(x, d, 2)[0]), d.stride()


def test_varlen_and_empty_sequences():
    """Each sequence's descale and amax; a zero-length sequence keeps amax 0."""
    gen = torch.Generator().manual_seed(4)
    lens = [9, 0, 40, 3]
    x = inputs(gen, sum(lens), 4, 32)
    cu = torch.tensor([0, 9, 9, 49, 52], dtype=torch.int32, device=DEV)
    descale = (torch.rand(4, 2, generator=gen) * 0.03 + 0.005).to(DEV)
    y, amax = quantize_fp8_delayed(x, descale, cu_seqlens=cu, heads_kv=2)
    start = 0
    for b, n in enumerate(lens):
        xs = x[start:start + n][None]
        y_ref, amax_ref = reference(xs, descale[b:b + 1], 2)
        assert torch.equal(bits(y[start:start + n][None]), y_ref) and torch.equal(amax[b].cpu(), amax_ref[0])
        start += n
    assert (amax[1] == 0).all()


def test_head_major_x_keeps_its_layout_and_bits():
    gen = torch.Generator().manual_seed(5)
    x = inputs(gen, 2, 4, 23, 32).transpose(1, 2)  # (b, s, h, d) stored as (b, h, s, d)
    descale = torch.full((2, 2), 0.02, device=DEV)
    y, amax = quantize_fp8_delayed(x, descale, heads_kv=2)
    y2, amax2 = quantize_fp8_delayed(x.contiguous(), descale, heads_kv=2)
    assert y.stride() == x.stride() and torch.equal(bits(y), bits(y2)) and torch.equal(amax, amax2)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the interpreter's inf / inf
def test_non_finite_values_show_in_the_amax():
    """A NaN makes its slice's amax NaN (the caller cannot miss it) and stays NaN in y; an inf
    makes its slice's amax inf and saturates to 448 in y. The other slices are untouched."""
    gen = torch.Generator().manual_seed(6)
    x = inputs(gen, 2, 12, 4, 32)
    x[0, 3, 1, 5], x[1, 7, 2, 9] = float("nan"), float("-inf")
    descale = torch.full((2, 4), 0.05, device=DEV)
    y, amax = quantize_fp8_delayed(x, descale)
    a = amax.cpu()
    assert a[0, 1].isnan() and a[1, 2] == float("inf")
    finite = x.cpu().float().nan_to_num(0.0, 0.0, 0.0).abs().amax(dim=(1, 3))
    keep = torch.ones(2, 4, dtype=torch.bool)
    keep[0, 1] = keep[1, 2] = False
    assert torch.equal(a[keep], finite[keep])
    assert bits(y)[0, 3, 1, 5] & 0x7F == 0x7F and bits(y)[1, 7, 2, 9] == 0xFE  # NaN; -448


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the interpreter's 3e38 * 2^64
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_division_edges(dtype):
    """Descales from 2^-149 (subnormal) to 1e30 and values from 0 and -0 to 3e38: every quotient
    correctly rounded, saturated past 448 (a huge x over a small d must not become NaN), as the
    float64 reference divides."""
    gen = torch.Generator().manual_seed(9)
    descale = torch.tensor([[2.0 ** -149, 2.0 ** -100, 0.0173, 1e30]])
    x = torch.randn(1, 64, 4, 16, generator=gen, dtype=torch.float64)
    x = x * torch.tensor([2.0 ** -140, 2.0 ** -95, 3.0, 1e31], dtype=torch.float64)[:, None]
    x[0, :4, :, 0] = torch.tensor([3e38, -3e38, 0.0, -0.0], dtype=torch.float64)[:, None]
    x[0, 4, :, :3] = descale[0, :, None].double() * torch.tensor([432.0, 447.99, 448.5], dtype=torch.float64)
    x = x.to(dtype).to(DEV)
    y, amax = quantize_fp8_delayed(x, descale.to(DEV))
    y_ref, amax_ref = reference(x, descale, 4)
    assert torch.equal(bits(y), y_ref) and torch.equal(amax.cpu(), amax_ref)
    assert (bits(y)[0, 0, :, 0] == 0x7E).all() and (bits(y)[0, 1, :, 0] == 0xFE).all()  # +-448, not NaN
    assert (bits(y)[0, 2, :, 0] == 0x00).all() and (bits(y)[0, 3, :, 0] == 0x80).all()


@pytest.mark.parametrize("granularity", [PerHead(2), PerHead(), PerTensor()])
@pytest.mark.parametrize("algo", ["max", "most_recent"])
def test_quantize_delayed_is_the_reference_in_one_pass(granularity, algo):
    """Five steps of a growing, jumping, then shrinking range: `quantize_delayed` gives
    `fp8lab.scaling.quantize`'s bits and descales at every step, and keeps the same history."""
    gen = torch.Generator().manual_seed(7)
    ref_state = DelayedAmax(history_len=3, algo=algo, margin=1 if algo == "max" else 0)
    state = DelayedAmax(history_len=3, algo=algo, margin=ref_state.margin)
    reference_strategy, strategy = ScaleStrategy(granularity, ref_state), ScaleStrategy(granularity, state)
    for step, spread in enumerate((1.0, 1.1, 30.0, 0.5, 0.6)):
        x = inputs(gen, 2, 13, 4, 32) * spread
        y_ref, d_ref = quantize(x.cpu(), reference_strategy)
        y, d = quantize_delayed(x, strategy)
        assert torch.equal(d.cpu(), d_ref) and torch.equal(bits(y), bits(y_ref)), step
    assert torch.equal(state.history.cpu(), ref_state.history) and torch.equal(state.descale.cpu(), ref_state.descale)
    y3, _ = quantize_delayed(x[0], strategy)  # (tokens, heads, d): one sequence, as the reference takes it
    assert torch.equal(bits(y3), bits(quantize(x[0].cpu(), reference_strategy)[0]))


def test_quantize_delayed_refuses_what_it_cannot_do():
    x = torch.randn(1, 8, 4, 32, device=DEV, dtype=torch.bfloat16)
    for strategy, match in ((ScaleStrategy(PerHead(2)), "DelayedAmax"),
                            (ScaleStrategy(PerChannel(), DelayedAmax()), "per tensor or per head"),
                            (ScaleStrategy(source=DelayedAmax(), fmt="e5m2"), "e4m3fn"),
                            (ScaleStrategy(source=DelayedAmax(), saturate=False), "saturate")):
        with pytest.raises(ValueError, match=match):
            quantize_delayed(x, strategy)
    state = DelayedAmax()
    quantize_delayed(x, ScaleStrategy(source=state))
    before = state.history.clone()
    x[0, 3, 1, 2] = float("nan")
    with pytest.raises(ValueError, match="NaN or inf"):
        quantize_delayed(x, ScaleStrategy(source=state))
    assert torch.equal(state.history, before) and state.steps == 1


@pytest.mark.parametrize(
    "descale,exc,match",
    [
        ("list", TypeError, "float32 tensor"),
        (torch.ones(2, 4, dtype=torch.float64), ValueError, "float32"),
        (torch.ones(4, 2), ValueError, r"\(2, 4\)"),
        (torch.tensor([[1.0, 0.0, 1.0, 1.0]] * 2), ValueError, "finite values > 0"),
        (torch.tensor([[1.0, float("nan"), 1.0, 1.0]] * 2), ValueError, "finite values > 0"),
    ],
)
def test_bad_descales(descale, exc, match):
    if DEV == "cuda" and "finite" in match:
        pytest.skip("a GPU descale's values are not read back (no sync per call)")
    x = torch.randn(2, 4, 4, 32, device=DEV, dtype=torch.bfloat16)
    with pytest.raises(exc, match=match):
        quantize_fp8_delayed(x, [1.0] if isinstance(descale, str) else descale.to(DEV))


@pytest.mark.gpu
def test_programs_cross_sequences_on_gpu():
    """On the GPU programs loop over consecutive tiles (`_delayed_programs`), which here span sequence
    boundaries: the per-(sequence, kv head) amax must still be each sequence's."""
    if DEV != "cuda":
        pytest.skip("needs a CUDA GPU")
    gen = torch.Generator().manual_seed(8)
    x = inputs(gen, 7, 1523, 8, 128)
    descale = (torch.rand(7, 2, generator=gen) * 0.02 + 0.004).to(DEV)
    y, amax = quantize_fp8_delayed(x, descale, heads_kv=2)
    ntiles = -(-1523 // Q._block_t(8, 128, Q.DELAYED_TILE_ELEMENTS))
    programs = Q._delayed_programs(7 * ntiles, torch.cuda.get_device_properties(0).multi_processor_count)
    per_program = -(-7 * ntiles // programs)
    assert per_program > 1 and ntiles % per_program  # some program's tiles span two sequences
    y_ref, amax_ref = reference(x, descale, 2)
    assert torch.equal(bits(y), y_ref) and torch.equal(amax.cpu(), amax_ref)


def test_the_launch_runs_small_inputs_in_one_wave():
    """v26's rule: DELAYED_PROGRAMS_PER_SM (8: two waves of the 4 that fit per SM) while each program keeps
    DELAYED_MIN_TILES tiles, else one wave of DELAYED_SMALL_PROGRAMS_PER_SM; the interpreter takes a few."""
    def tiles(mib: int) -> int:  # tiles of a bf16 x of `mib` MiB
        return (mib << 20) // 2 // Q.DELAYED_TILE_ELEMENTS

    sms = 132  # an H200
    assert Q._delayed_programs(tiles(256), sms) == Q._delayed_programs(tiles(128), sms) == 8 * sms
    assert Q._delayed_programs(tiles(64), sms) == Q._delayed_programs(tiles(32), sms) == 4 * sms
    assert Q._delayed_programs(tiles(128), None) == Q.DELAYED_CPU_PROGRAMS

"""fp8lab.formats against the format specifications, a brute-force reference and torch's casts.

The expected constants below are the specifications (OCP OFP8 / MX, AMD's fnuz
formats), typed from the spec on purpose: they are what the code must reproduce.
"""

from __future__ import annotations

import math

import pytest
import torch

from fp8lab import formats as F

NAMES = list(F.FORMATS)
TORCH_NAMES = [n for n in NAMES if F.FORMATS[n].torch_dtype is not None]
SIGNED = [n for n in NAMES if F.FORMATS[n].has_sign]

# name: bias, max, min_normal, min_subnormal, #NaN codes, #inf codes, has -0
SPEC = {
    "e4m3fn": (7, 448.0, 2.0**-6, 2.0**-9, 2, 0, True),
    "e5m2": (15, 57344.0, 2.0**-14, 2.0**-16, 6, 2, True),
    "e4m3fnuz": (8, 240.0, 2.0**-7, 2.0**-10, 1, 0, False),
    "e5m2fnuz": (16, 57344.0, 2.0**-15, 2.0**-17, 1, 0, False),
    "e8m0fnu": (127, 2.0**127, 2.0**-127, 2.0**-127, 1, 0, False),
}
NAN_CODES = {
    "e4m3fn": {0x7F, 0xFF},
    "e5m2": {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF},
    "e4m3fnuz": {0x80},
    "e5m2fnuz": {0x80},
    "e8m0fnu": {0xFF},
}
ALL_CODES = torch.arange(256, dtype=torch.int64).to(torch.uint8)


# ---------------------------------------------------------------- helpers


def same_bits(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise: equal values with equal signs (so -0 != +0), NaN == NaN."""
    a, b = a.double(), b.double()
    both_nan = torch.isnan(a) & torch.isnan(b)
    return both_nan | ((a == b) & (torch.signbit(a) == torch.signbit(b)))


def assert_same(ref: torch.Tensor, got: torch.Tensor, x: torch.Tensor, what: str) -> None:
    ok = same_bits(ref, got)
    if not bool(ok.all()):
        bad = (~ok).nonzero().flatten()[:8]
        rows = [(x.flatten()[i].item(), ref.flatten()[i].item(), got.flatten()[i].item()) for i in bad]
        raise AssertionError(f"{what}: {int((~ok).sum())} mismatches of {ok.numel()}; (input, ref, got): {rows}")


def all_16bit(dtype: torch.dtype) -> torch.Tensor:
    """Every 16-bit pattern as a float16/bfloat16 tensor (65536,)."""
    return torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype)


def float32_samples(f: F.FP8Format, n: int, seed: int) -> torch.Tensor:
    """float32 inputs that stress `f`: random bit patterns, log-uniform magnitudes over the
    format's range and beyond, exact ties between grid neighbours and their float32
    neighbours, the overflow boundary and the subnormal range."""
    g = torch.Generator().manual_seed(seed)
    bits = torch.randint(-(2**31), 2**31, (n,), generator=g, dtype=torch.int64).to(torch.int32)
    random_bits = bits.view(torch.float32)
    lo, hi = math.log2(f.min_subnormal) - 3, min(math.log2(f.max) + 3, 127.9)
    e = torch.rand(n, generator=g, dtype=torch.float64) * (hi - lo) + lo
    sign = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).double()
    log_uniform = (sign * torch.exp2(e)).float()
    grid = F.representable_values(f)
    mids = (grid[:-1] + grid[1:]) / 2  # exact halfway points (exact in float32)
    gap = F.ulp(f.max, f).item()
    boundary = torch.tensor([f.max + k * gap / 8 for k in range(-4, 13)], dtype=torch.float64)
    sub = torch.linspace(0, 2 * f.min_normal, 997, dtype=torch.float64)
    special = torch.cat([mids, boundary, sub, -mids, -boundary, -sub]).float()
    up = torch.nextafter(special, torch.full_like(special, math.inf))
    down = torch.nextafter(special, torch.full_like(special, -math.inf))
    return torch.cat([random_bits, log_uniform, special, up, down])


def torch_cast(x: torch.Tensor, f: F.FP8Format) -> torch.Tensor:
    """torch's own cast, decoded to float64 by our bit-field table."""
    return F.decode(x.to(f.torch_dtype).view(torch.uint8), f)


def kinds(x: torch.Tensor, f: F.FP8Format) -> dict[str, torch.Tensor]:
    """Split inputs into the probe's kinds (boolean masks that partition x)."""
    x64 = x.double()
    nan, inf = torch.isnan(x64), torch.isinf(x64)
    finite = ~nan & ~inf
    m = {"nan": nan, "infinity": inf}
    if not f.has_sign:
        m["negative"] = finite & (x64 < 0)
        finite = finite & (x64 >= 0)
    q = F.quantize(x64, f, overflow="nonfinite")
    m["overflow"] = finite & ~torch.isfinite(q)
    rest = finite & ~m["overflow"]
    if not f.has_zero:
        m["underflow"] = rest & (x64 == 0)
        m["float32_subnormal"] = rest & (x64 > 0) & (x64 < 2.0**-126)
        rest = rest & (x64 >= 2.0**-126)
    m["in_range"] = rest
    return m


@pytest.fixture(scope="module")
def probe() -> dict:
    return F.probe_torch_casts("cpu")


def compare_with_torch(x: torch.Tensor, f: F.FP8Format, probe: dict) -> dict[str, int]:
    """Compare torch's cast with quantize on every input whose kind the probe says
    torch handles like one of our policies. Returns the count compared per kind."""
    info = probe["formats"][f.name]
    assert info["supported"], info
    assert info["matches"]["in_range"], f"torch's in-range rounding differs from round-to-nearest-even for {f.name}"
    got = torch_cast(x, f)
    counts = {}
    for kind, mask in kinds(x, f).items():
        policies = info["matches"].get(kind, [])
        if not policies or not bool(mask.any()):
            counts[kind] = 0
            continue
        ref = F.quantize(x[mask].double(), f, overflow=policies[0])
        assert_same(ref, got[mask], x[mask], f"{f.name} {kind} (policy {policies[0]})")
        counts[kind] = int(mask.sum())
    return counts


def brute_force_nearest(x: torch.Tensor, f: F.FP8Format) -> torch.Tensor:
    """Round finite in-range |x| to the nearest grid value by search; ties to the even
    code (up for e8m0fnu). Independent of quantize's arithmetic. float64 in/out."""
    grid = F.representable_values(f)
    a = x.abs()
    i = torch.searchsorted(grid, a).clamp(1, len(grid) - 1)
    lo, hi = grid[i - 1], grid[i]
    lo = torch.where(a <= grid[0], grid[0], lo)
    d_lo, d_hi = a - lo, hi - a
    hi_even = (F.encode(hi, f) & 1) == 0
    tie_hi = hi_even if f.mantissa_bits > 0 else torch.ones_like(hi_even)
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & tie_hi)
    r = torch.where(a <= grid[0], grid[0], torch.where(pick_hi, hi, lo))
    if not f.has_sign:
        return r
    return torch.copysign(r, x) + (0.0 if not f.has_negative_zero else -0.0)  # fnuz: no -0


# ---------------------------------------------------------------- constants and lookup


@pytest.mark.parametrize("name", NAMES)
def test_constants_match_the_spec(name: str) -> None:
    f = F.FORMATS[name]
    bias, mx, mn, ms, _, _, _ = SPEC[name]
    assert (f.bias, f.max, f.min_normal, f.min_subnormal) == (bias, mx, mn, ms)
    assert f.bits == 8 and f.has_nan
    assert f.has_inf == (SPEC[name][5] > 0)
    assert f.min_normal == 2.0**f.min_exponent and f.max_exponent == math.frexp(mx)[1] - 1


@pytest.mark.parametrize("name", NAMES)
def test_special_codes(name: str) -> None:
    f = F.FORMATS[name]
    v = F.decode(ALL_CODES, f)
    assert set(torch.isnan(v).nonzero().flatten().tolist()) == NAN_CODES[name]
    assert int(torch.isinf(v).sum()) == SPEC[name][5]


@pytest.mark.parametrize("name", TORCH_NAMES)
def test_decode_matches_torch_on_all_256_codes(name: str) -> None:
    f = F.FORMATS[name]
    theirs = ALL_CODES.view(f.torch_dtype).double()
    assert_same(theirs, F.decode(ALL_CODES, f), ALL_CODES, name)
    assert_same(theirs, F.decode(ALL_CODES.view(f.torch_dtype), f), ALL_CODES, name)


def test_get_format_lookup() -> None:
    for name, f in F.FORMATS.items():
        assert F.get_format(name) is f
        assert F.get_format(name.upper()) is f
        assert F.get_format(f"float8_{name}") is f
        assert F.get_format(f) is f
        if f.torch_dtype is not None:
            assert F.get_format(f.torch_dtype) is f
            assert F.get_format(str(f.torch_dtype)) is f


@pytest.mark.parametrize("bad", ["e4m3", "fp8", "", "e3m4", torch.float16, 3])
def test_unknown_format_names_the_known_ones(bad) -> None:
    with pytest.raises(ValueError) as err:
        F.get_format(bad)
    for name in NAMES:
        assert name in str(err.value)
    with pytest.raises(ValueError):
        F.quantize(torch.ones(3), bad)


# ---------------------------------------------------------------- grid, encode/decode, ulp


@pytest.mark.parametrize("name", NAMES)
def test_representable_values(name: str) -> None:
    f = F.FORMATS[name]
    _, mx, _, ms, n_nan, n_inf, neg_zero = SPEC[name]
    v = F.representable_values(f)
    assert v.dtype == torch.float64
    assert v.numel() == 256 - n_nan - n_inf - int(neg_zero)
    assert bool((v[1:] > v[:-1]).all()), "not strictly increasing"
    assert bool(torch.isfinite(v).all())
    assert v.max().item() == mx
    assert v[v > 0].min().item() == ms
    if f.has_sign:
        assert torch.equal(v, -v.flip(0))
    else:
        assert torch.equal(v, torch.exp2(torch.arange(-127, 128, dtype=torch.float64)))


@pytest.mark.parametrize("name", NAMES)
def test_encode_decode_round_trip(name: str) -> None:
    f = F.FORMATS[name]
    v = F.representable_values(f)
    assert torch.equal(F.decode(F.encode(v, f), f), v)
    codes = ALL_CODES[~torch.isnan(F.decode(ALL_CODES, f))]
    values = F.decode(codes, f)
    assert torch.equal(F.encode(values, f), codes)  # -0.0 encodes back to 0x80 where it exists
    for dtype in (torch.float32, torch.bfloat16) + ((torch.float16,) if f.has_zero else ()):
        fits = v.to(dtype).double() == v
        assert torch.equal(F.decode(F.encode(v[fits].to(dtype), f), f), v[fits])


@pytest.mark.parametrize("name", NAMES)
def test_encode_specials_and_errors(name: str) -> None:
    f = F.FORMATS[name]
    nan = F.encode(torch.tensor([math.nan, -math.nan]), f)
    assert bool(torch.isnan(F.decode(nan, f)).all())
    if f.has_zero:
        z = F.encode(torch.tensor([0.0, -0.0]), f).tolist()
        assert z == ([0x00, 0x80] if f.has_negative_zero else [0x00, 0x00])
    bad = [f.max * 2, float(F.representable_values(f)[-2] + F.representable_values(f)[-1]) / 2]
    if not f.has_inf:
        bad.append(math.inf)
    if not f.has_zero:
        bad += [0.0, -1.0]
    for value in bad:
        with pytest.raises(ValueError, match="not representable"):
            F.encode(torch.tensor([value], dtype=torch.float64), f)
    if f.has_inf:
        assert F.decode(F.encode(torch.tensor([math.inf, -math.inf]), f), f).tolist() == [math.inf, -math.inf]


@pytest.mark.parametrize("name", NAMES)
def test_ulp_is_the_gap_to_the_next_value(name: str) -> None:
    f = F.FORMATS[name]
    v = F.representable_values(f)
    nonneg = v[v >= 0]
    gaps = nonneg[1:] - nonneg[:-1]
    assert torch.equal(F.ulp(nonneg[:-1], f), gaps)
    assert torch.equal(F.ulp(-nonneg[:-1], f), gaps)
    # any point strictly between neighbours has the same ulp as the lower one
    inside = nonneg[:-1] + gaps * torch.rand(gaps.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    inside = torch.where(inside > nonneg[:-1], inside, nonneg[:-1])
    assert torch.equal(F.ulp(inside, f), gaps)
    top = F.ulp(torch.tensor(f.max), f)
    assert F.ulp(torch.tensor(4 * f.max, dtype=torch.float64), f).item() == top.item()
    assert F.ulp(0.0, f).item() == f.min_subnormal
    assert bool(torch.isnan(F.ulp(torch.tensor([math.nan, math.inf, -math.inf]), f)).all())
    assert F.ulp(torch.tensor([1.0], dtype=torch.float16), f).dtype == torch.float64


# ---------------------------------------------------------------- quantize (reference) properties


@pytest.mark.parametrize("name", NAMES)
def test_quantize_matches_brute_force_search(name: str) -> None:
    f = F.FORMATS[name]
    g = torch.Generator().manual_seed(11)
    grid = F.representable_values(f)
    mids = (grid[:-1] + grid[1:]) / 2
    lo, hi = math.log2(f.min_subnormal) - 2, math.log2(f.max)
    x = torch.exp2(torch.rand(20011, generator=g, dtype=torch.float64) * (hi - lo) + lo)
    x = torch.cat([x, grid, mids, torch.nextafter(mids, mids * 2), torch.nextafter(mids, mids * 0)])
    x = x[x <= f.max]
    if f.has_sign:
        x = torch.cat([x, -x])
    assert_same(brute_force_nearest(x, f), F.quantize(x, f), x, name)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_quantize_keeps_dtype_shape_and_is_idempotent(name: str, dtype: torch.dtype) -> None:
    f = F.FORMATS[name]
    if not f.has_zero and dtype == torch.float16:
        with pytest.raises(TypeError, match="e8m0fnu"):
            F.quantize(torch.ones(3, dtype=dtype), f)
        return
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(7, 113, generator=g, dtype=torch.float64) * 30).to(dtype)
    if not f.has_sign:
        x = x.abs() + 1e-3
    q = F.quantize(x, f)
    assert q.dtype == dtype and q.shape == x.shape
    assert torch.equal(F.quantize(q, f), q)
    assert bool(torch.isin(q.double().abs(), F.representable_values(f)).all())
    s = torch.sort(x.flatten().double()).values.to(dtype)
    qs = F.quantize(s, f).double()
    assert bool((qs[1:] >= qs[:-1]).all()), "quantize is not monotonic"


@pytest.mark.parametrize("name", NAMES)
def test_special_inputs_under_each_policy(name: str) -> None:
    """The module docstring's table of NaN / inf / overflow / underflow results."""
    f = F.FORMATS[name]
    nonfinite = math.inf if f.has_inf else math.nan
    x = torch.tensor([math.nan, math.inf, -math.inf, 4 * f.max if f.has_zero else 1e38 * 3], dtype=torch.float64)
    sat = F.quantize(x, f, overflow="saturate")
    non = F.quantize(x, f, overflow="nonfinite")
    assert math.isnan(sat[0]) and math.isnan(non[0])
    if f.has_sign:
        assert sat[1:].tolist() == [f.max, -f.max, f.max]
        assert same_bits(non[1:], torch.tensor([nonfinite, -nonfinite, nonfinite], dtype=torch.float64)).all()
        tiny = torch.tensor([f.min_subnormal / 2, -f.min_subnormal / 2, -0.0], dtype=torch.float64)
        expect = [0.0, -0.0, -0.0] if f.has_negative_zero else [0.0, 0.0, 0.0]
        for overflow in F.OVERFLOWS:
            assert same_bits(F.quantize(tiny, f, overflow=overflow), torch.tensor(expect, dtype=torch.float64)).all()
    else:
        assert sat[1:].tolist() == [f.max, f.min_normal, f.max]
        assert bool(torch.isnan(non[1:]).all())
        low = torch.tensor([0.0, 1e-45, 2.0**-140, -1.0, -0.0], dtype=torch.float64)
        assert F.quantize(low, f, overflow="saturate").tolist() == [f.min_normal] * 5
        assert F.quantize(low[:3], f, overflow="nonfinite").tolist() == [f.min_normal] * 3
        assert bool(torch.isnan(F.quantize(low[3:4], f, overflow="nonfinite")).all())


# ---------------------------------------------------------------- against torch's casts


def test_probe_reports_torch_behaviour(probe: dict) -> None:
    assert probe["library"] == "torch" and probe["torch"] == torch.__version__ and probe["device"] == "cpu"
    for name in TORCH_NAMES:
        info = probe["formats"][name]
        assert info["supported"]
        assert info["overflow"] in ("saturates", "NaN", "inf", "mixed")
        assert info["infinity"] in ("saturates", "NaN", "inf", "mixed")
        assert info["nan"] == "NaN"
        assert info["rounding"] == "nearest"
    rows = [r for r in probe["rows"] if r["format"] == "e4m3fn" and r["case"] == "500"]
    assert len(rows) == 1 and rows[0]["nonfinite"] == "nan" and rows[0]["saturate"] == 448.0
    assert rows[0]["cast"] in (448.0, "nan")
    # the probe's verdict follows from its rows
    for name in TORCH_NAMES:
        rs = [r for r in probe["rows"] if r["format"] == name and r["kind"] == "overflow"]
        verdict = probe["formats"][name]["matches"]["overflow"]
        assert ("saturate" in verdict) == all(r["cast"] == r["saturate"] for r in rs)


@pytest.mark.parametrize("name", TORCH_NAMES)
def test_quantize_equals_torch_cast_on_every_float16(name: str, probe: dict) -> None:
    f = F.FORMATS[name]
    x = all_16bit(torch.float16).float()
    counts = compare_with_torch(x, f, probe)
    assert counts["in_range"] > 30000
    if f.has_zero:  # float16 -> fp8 directly (torch may go through float32) and bfloat16's 65536 patterns
        compare_with_torch(all_16bit(torch.float16), f, probe)
    compare_with_torch(all_16bit(torch.bfloat16).float(), f, probe)


@pytest.mark.parametrize("name", TORCH_NAMES)
def test_quantize_equals_torch_cast_on_random_float32(name: str, probe: dict) -> None:
    f = F.FORMATS[name]
    x = float32_samples(f, 120_001, seed=1000 + NAMES.index(name))
    counts = compare_with_torch(x, f, probe)
    assert counts["in_range"] > 60_000


def test_torch_e4m3fn_policy_is_decided_by_the_probe(probe: dict) -> None:
    """Whatever this torch does beyond 448, quantize reproduces it under the matching policy."""
    x = torch.tensor([464.0, 465.0, 500.0, 1e6, math.inf])
    got = torch_cast(x, F.FORMATS["e4m3fn"])
    assert got[0].item() == 448.0  # the tie at 464 rounds to even in range
    policy = probe["formats"]["e4m3fn"]["matches"]["overflow"]
    assert policy, f"torch's e4m3fn overflow matches neither policy: {got.tolist()}"
    assert_same(F.quantize(x[1:4], "e4m3fn", overflow=policy[0]), got[1:4], x[1:4], "e4m3fn overflow")


def test_probe_handles_a_missing_dtype(monkeypatch) -> None:
    fake = F.FP8Format(**{**F.FORMATS["e8m0fnu"].__dict__, "torch_dtype": None})
    monkeypatch.setitem(F.FORMATS, "e8m0fnu", fake)
    info = F.probe_torch_casts()["formats"]["e8m0fnu"]
    assert info["supported"] is False and "no dtype" in info["error"]
    with pytest.raises(ValueError, match="no dtype"):
        F.cast_to_fp8(torch.ones(2), fake)


def test_probe_ml_dtypes_when_installed() -> None:
    pytest.importorskip("ml_dtypes")
    p = F.probe_ml_dtypes()
    assert p is not None and p["library"] == "ml_dtypes"
    for name in ("e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz"):
        assert p["formats"][name]["rounding"] == "nearest"


# ---------------------------------------------------------------- cast_to_fp8


@pytest.mark.parametrize("name", TORCH_NAMES)
@pytest.mark.parametrize("overflow", F.OVERFLOWS)
def test_cast_to_fp8_equals_quantize(name: str, overflow: str) -> None:
    f = F.FORMATS[name]
    x32 = torch.cat([float32_samples(f, 20_011, seed=7), all_16bit(torch.float16).float()])
    inputs = [x32, x32.to(torch.bfloat16), x32.double()]
    if f.has_zero:
        inputs.append(all_16bit(torch.float16))
    # a float64 just above a tie: torch's own float64 cast rounds twice (via float32)
    tie = 1 + F.ulp(1.0, f).item() / 2
    inputs.append(torch.tensor([tie + 2.0**-40, tie, -(tie + 2.0**-40)], dtype=torch.float64))
    for x in inputs:
        y = F.cast_to_fp8(x, f, overflow=overflow)
        assert y.dtype == f.torch_dtype and y.shape == x.shape
        ref = F.quantize(x if f.has_zero else x.float(), f, overflow=overflow)
        assert_same(ref, F.decode(y.view(torch.uint8), f), x, f"{name} {x.dtype} {overflow}")


@pytest.mark.parametrize("name", TORCH_NAMES)
def test_nan_keeps_its_sign_from_every_input_dtype(name: str) -> None:
    """A -NaN input gives the format's negative NaN code (where it has one) whatever the input dtype:
    float64 inputs take fp8lab's own rounding path, which must not drop the sign."""
    f = F.FORMATS[name]
    nan = torch.tensor([math.nan, -math.nan])
    codes = {dt: F.cast_to_fp8(nan.to(dt), f).view(torch.uint8).tolist() for dt in (torch.float32, torch.float64)}
    assert codes[torch.float32] == codes[torch.float64] == F.encode(nan, f).tolist(), codes
    assert torch.isnan(F.quantize(nan.double(), f)).all() and F.quantize(nan.double(), f).signbit().tolist() == [False, True]


def test_cast_to_fp8_saturates_by_default() -> None:
    y = F.cast_to_fp8(torch.tensor([500.0, -1e6, math.inf, -math.inf, 464.0, math.nan]))
    assert y.dtype == torch.float8_e4m3fn
    out = y.float()
    assert out[:5].tolist() == [448.0, -448.0, 448.0, -448.0, 448.0] and math.isnan(out[5])


# ---------------------------------------------------------------- stochastic rounding


@pytest.mark.parametrize("name", NAMES)
def test_stochastic_rounding_is_unbiased_and_picks_neighbours(name: str) -> None:
    f = F.FORMATS[name]
    g = torch.Generator().manual_seed(2024)
    grid = F.representable_values(f)
    pos = grid[grid > 0]
    idx = torch.randint(0, len(pos) - 1, (64,), generator=g)
    idx[:4] = torch.tensor([0, 1, len(pos) - 2, len(pos) // 2])  # subnormals, max's neighbour
    lo, hi = pos[idx], pos[idx + 1]
    frac = torch.rand(64, generator=g, dtype=torch.float64) * 0.98 + 0.01
    x = lo + frac * (hi - lo)
    if f.has_sign:
        x = torch.where(torch.arange(64) % 2 == 0, x, -x)
    draws = 4000
    xs = x.repeat(draws, 1)
    q = F.quantize(xs, f, rounding="stochastic", generator=g)
    a = q.abs()
    assert bool(((a == lo) | (a == hi)).all()), "stochastic rounding left the two neighbours"
    assert bool((torch.sign(q) == torch.sign(x)).all())
    p = (xs.abs() - lo) / (hi - lo)
    sigma = (hi - lo) * torch.sqrt(p[0] * (1 - p[0]) / draws)
    z = (a.mean(0) - x.abs()) / sigma  # signed, in units of each value's standard error
    assert z.abs().max().item() < 5.5, f"bias beyond 5.5 sigma: z = {z.abs().max().item():.2f}"
    # pooled over the 64 values a small systematic bias (e.g. P(up) = 1.02 p) shows too
    pooled = z.sum().item() / math.sqrt(len(z))
    assert abs(pooled) < 5, f"pooled bias z = {pooled:.2f}"
    # grid values never move, and the stream is reproducible from the generator
    assert torch.equal(F.quantize(grid, f, rounding="stochastic", generator=g), grid)
    a1 = F.quantize(xs[:50], f, rounding="stochastic", generator=torch.Generator().manual_seed(1))
    a2 = F.quantize(xs[:50], f, rounding="stochastic", generator=torch.Generator().manual_seed(1))
    assert torch.equal(a1, a2)


def test_stochastic_rounding_overflow_policy() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.full((1000,), 460.0)  # between 448 and the (non-existent) 480
    sat = F.quantize(x, "e4m3fn", rounding="stochastic", overflow="saturate", generator=g)
    assert bool((sat == 448).all())
    non = F.quantize(x, "e4m3fn", rounding="stochastic", overflow="nonfinite", generator=g)
    assert bool(((non == 448) | torch.isnan(non)).all()) and bool(torch.isnan(non).any())


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64])
def test_non_floating_tensors_raise_type_error(dtype: torch.dtype) -> None:
    x = torch.zeros(4, dtype=dtype)
    for fn in (
        lambda: F.quantize(x, "e4m3fn"),
        lambda: F.cast_to_fp8(x),
        lambda: F.ulp(x, "e5m2"),
        lambda: F.encode(x, "e5m2"),
    ):
        with pytest.raises(TypeError, match="floating"):
            fn()
    with pytest.raises(TypeError):
        F.quantize([1.0, 2.0], "e4m3fn")  # a list is not a tensor


def test_bad_arguments() -> None:
    x = torch.ones(3)
    with pytest.raises(ValueError, match="rounding"):
        F.quantize(x, "e4m3fn", rounding="truncate")
    with pytest.raises(ValueError, match="overflow"):
        F.quantize(x, "e4m3fn", overflow="clip")
    with pytest.raises(ValueError, match="overflow"):
        F.cast_to_fp8(x, overflow="wrap")
    with pytest.raises(ValueError, match="generator"):
        F.quantize(x, "e4m3fn", generator=torch.Generator())
    with pytest.raises(TypeError, match="uint8"):
        F.decode(torch.zeros(3, dtype=torch.int32), "e4m3fn")
    with pytest.raises(TypeError, match="uint8"):
        F.decode(torch.zeros(3, dtype=torch.float8_e5m2), "e4m3fn")


# ---------------------------------------------------------------- GPU


@pytest.mark.gpu
def test_cuda_probe_and_cast_agree_with_reference() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    probe = F.probe_torch_casts("cuda")
    assert probe["device"].startswith("cuda")
    for name in TORCH_NAMES:
        f = F.FORMATS[name]
        if not probe["formats"][name]["supported"]:
            continue
        x = float32_samples(f, 50_000, seed=3)
        for overflow in F.OVERFLOWS:
            y = F.cast_to_fp8(x.cuda(), f, overflow=overflow).cpu()
            assert_same(F.quantize(x, f, overflow=overflow), F.decode(y.view(torch.uint8), f), x, f"cuda {name}")
        got = F.decode(x.cuda().to(f.torch_dtype).cpu().view(torch.uint8), f)
        for kind, mask in kinds(x, f).items():
            policies = probe["formats"][name]["matches"].get(kind, [])
            if policies and bool(mask.any()):
                assert_same(F.quantize(x[mask], f, overflow=policies[0]), got[mask], x[mask], f"cuda {name} {kind}")

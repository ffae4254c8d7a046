"""fp8lab.kvcache: vLLM's paged FP8 KV cache, written and read back."""

import pytest
import torch

from fp8lab import kvcache
from fp8lab.formats import quantize
from fp8lab.kvcache import (
    PagedKVCache,
    cache_torch_dtype,
    kv_bytes_per_token,
    paged_decode,
    cache_fp8_quant,
    scaled_fp8_quant,
    vllm_dynamic_scales,
)


def _random_pages(g, num_blocks, lens, block_size):
    table, slots, _ = kvcache.random_pages(lens, block_size, g, num_blocks)
    return table, slots


def test_random_pages_are_distinct_and_map_every_token():
    g = torch.Generator().manual_seed(5)
    lens = [5, 17, 0, 1]
    table, slots, num_blocks = kvcache.random_pages(lens, 4, g)
    assert num_blocks == 2 + 5 + 0 + 1 + 3 and table.dtype == torch.int32 and table.shape == (4, 5)
    pages = table[table >= 0]
    assert len(set(pages.tolist())) == len(pages) == 8 and (table[2] == -1).all()
    assert slots.tolist()[:5] == [int(table[0, t // 4]) * 4 + t % 4 for t in range(5)] and len(slots) == 23
    with pytest.raises(ValueError, match="need 8 pages, got 7"):
        kvcache.random_pages(lens, 4, g, num_blocks=7)


@pytest.mark.parametrize("kv_cache_dtype", ["fp8", "fp8_e4m3", "auto"])
def test_write_then_gather_round_trips(kv_cache_dtype):
    g = torch.Generator().manual_seed(11)
    lens, block_size, heads_kv, d = [5, 17, 1], 4, 3, 16
    fp8 = kv_cache_dtype != "auto"
    k = torch.randn(sum(lens), heads_kv, d, generator=g, dtype=torch.float64) * 3
    v = torch.randn(sum(lens), heads_kv, d, generator=g, dtype=torch.float64)
    k_scale, v_scale = (k.abs().max().item() / 448, v.abs().max().item() / 448) if fp8 else (1.0, 1.0)
    cache = PagedKVCache.allocate(16, block_size, heads_kv, d, kv_cache_dtype=kv_cache_dtype, k_scale=k_scale, v_scale=v_scale)
    table, slots = _random_pages(g, 16, lens, block_size)
    cache.write(k, v, slots)
    k_out, v_out, cu = cache.gather(table, lens)
    assert cu.tolist() == [0, 5, 22, 23]
    if fp8:
        # Stored values are exactly e4m3(x * (1 / scale)) with saturation, computed in float32 like vLLM.
        inv = 1.0 / torch.tensor(k_scale, dtype=torch.float32)
        assert torch.equal(k_out.double(), quantize((k.float() * inv).double(), "e4m3fn"))
        rel = (k_out.double() * k_scale - k).norm() / k.norm()
        assert 0 < rel < 2.0 ** -4  # e4m3 keeps 3 mantissa bits
        dk, dv = cache.descales(len(lens))
        assert dk.shape == (3, heads_kv) and dk.stride() == (0, 0) and dv[1, 2].item() == pytest.approx(v_scale)
    else:
        assert torch.equal(k_out, k.to(torch.bfloat16)) and torch.equal(v_out, v.to(torch.bfloat16))


def test_scaled_fp8_quant_saturates_and_matches_the_grid():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1000, generator=g) * 50
    scale = 0.0731
    q = scaled_fp8_quant(x, scale)
    assert q.dtype == torch.float8_e4m3fn
    assert q.float().abs().max() == 448  # saturated, not NaN
    expected = quantize((x.float() * (1.0 / torch.tensor(scale))).double(), "e4m3fn", overflow="saturate")
    assert torch.equal(q.double(), expected)


def test_the_cache_write_divides_where_q_multiplies_by_the_reciprocal():
    """vLLM's cache write stores `x / scale`, its Q quantization `x * (1 / scale)`: float32 rounds the two
    apart by an ulp now and then, and next to an FP8 rounding midpoint that stores the neighbouring code."""
    g = torch.Generator().manual_seed(31)
    grid = torch.arange(1, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float()  # positive finite codes
    apart = 0
    for scale in (0.01 + 0.09 * torch.rand(8, generator=g)).tolist():
        mid = (grid[:-1] + grid[1:]) / 2 * torch.tensor(scale, dtype=torch.float32)  # x at each rounding midpoint
        x = torch.cat([mid + k * torch.finfo(torch.float32).eps * mid for k in range(-4, 5)])[:, None, None]
        cache = PagedKVCache.allocate(1, x.shape[0], 1, 1, k_scale=scale, v_scale=scale)
        cache.write(x, x, torch.arange(x.shape[0]))
        divided = quantize((x.float() / torch.tensor(scale, dtype=torch.float32)).double(), "e4m3fn",
                           overflow="saturate")
        stored = cache.key_cache.reshape(-1, 1, 1).double()
        assert torch.equal(stored, divided) and torch.equal(cache_fp8_quant(x, scale).double(), divided)
        apart += int((stored != scaled_fp8_quant(x, scale).double()).sum())
    assert apart > 0  # the two roundings do part (about 4 in 5 scales part somewhere)


def test_padding_slots_are_skipped():
    cache = PagedKVCache.allocate(2, 4, 1, 8, k_scale=0.5, v_scale=0.25)
    x = torch.randn(3, 1, 8)
    cache.write(x, x, torch.tensor([1, -1, 6]))
    written = cache.key_cache.view(-1, 1, 8).float().abs().sum((1, 2)) > 0
    assert written.nonzero().flatten().tolist() == [1, 6]


def test_dynamic_scales_follow_vllm():
    q, k, v = torch.full((2, 2), 400.0), torch.full((2, 2), -20.0), torch.full((2, 2), 5.0)
    assert vllm_dynamic_scales(q, k, v) == pytest.approx((2.0, 0.1, 0.05))
    with pytest.raises(ValueError, match="k holds NaN"):
        vllm_dynamic_scales(q, k * float("nan"), v)


def test_bytes_per_token():
    assert kv_bytes_per_token(32, 8, 128, torch.bfloat16) == 2 * 32 * 8 * 128 * 2
    assert kv_bytes_per_token(32, 8, 128, cache_torch_dtype("fp8")) == 2 * 32 * 8 * 128


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: cache_torch_dtype("fp8_e5m2"), "e4m3 only"),
        (lambda: cache_torch_dtype("int8"), "expected one of"),
        (lambda: PagedKVCache.allocate(2, 4, 1, 8, kv_cache_dtype="auto", k_scale=0.5), "FP8 cache only"),
        (lambda: PagedKVCache.allocate(2, 4, 1, 8, k_scale=0.0), "finite scale > 0"),
        (lambda: PagedKVCache.allocate(2, 4, 1, 8, v_scale=float("nan")), "finite scale > 0"),
        (lambda: PagedKVCache.allocate(0, 4, 1, 8), "positive"),
        (lambda: scaled_fp8_quant(torch.ones(2, dtype=torch.int32), 1.0), "floating"),
    ],
)
def test_bad_input(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()


def test_bad_writes_and_reads():
    cache = PagedKVCache.allocate(2, 4, 2, 8, k_scale=0.5, v_scale=0.5)
    x = torch.randn(3, 2, 8)
    with pytest.raises(ValueError, match="past the cache"):
        cache.write(x, x, torch.tensor([0, 1, 8]))
    with pytest.raises(ValueError, match="same slot"):
        cache.write(x, x, torch.tensor([0, 1, 1]))
    with pytest.raises(ValueError, match="int64"):
        cache.write(x, x, torch.tensor([0, 1, 2], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"expected \(num_tokens, 2, 8\)"):
        cache.write(x[:, :1], x[:, :1], torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="sequence 0: 5 tokens need 2 pages, its block table row has 1"):
        cache.gather(torch.tensor([[0]]), [5])
    # -1 marks "no page" (random_pages): as an index it would read the cache's last page, another sequence's
    with pytest.raises(ValueError, match=r"block_table\[1, 1\] = -1 is not a page of the cache's 2"):
        cache.gather(torch.tensor([[0, -1], [1, -1]]), [3, 6])
    with pytest.raises(ValueError, match=r"block_table\[0, 0\] = 9 is not a page"):
        cache.gather(torch.tensor([[9]]), [3])
    with pytest.raises(ValueError, match="block_table: expected an int tensor"):
        cache.gather(torch.tensor([[0.0]]), [3])
    with pytest.raises(TypeError, match="k_scale: expected a number"):
        PagedKVCache.allocate(2, 4, 1, 8, k_scale="1.0")
    with pytest.raises(ValueError, match="non-empty tensor"):
        vllm_dynamic_scales(torch.ones(0, 2), torch.ones(1, 2), torch.ones(1, 2))


def test_paged_decode_matches_the_references_on_contiguous_data():
    from fp8lab.reference import AccumulatorModel, attention_exact, attention_fa3_fp8, fa3_decode_splits

    g = torch.Generator().manual_seed(5)
    lens, block_size, heads_q, heads_kv, d = [7, 19], 4, 4, 2, 64
    k = torch.randn(sum(lens), heads_kv, d, generator=g, dtype=torch.float64) * 2
    v = torch.randn(sum(lens), heads_kv, d, generator=g, dtype=torch.float64)
    q = torch.randn(len(lens), heads_q, d, generator=g, dtype=torch.float64)
    ks, vs, qs = k.abs().max().item() / 448, v.abs().max().item() / 400, q.abs().max().item() / 300
    cache = PagedKVCache.allocate(12, block_size, heads_kv, d, k_scale=ks, v_scale=vs)
    table, slots = _random_pages(g, 12, lens, block_size)
    cache.write(k, v, slots)
    cu_q = torch.tensor([0, 1, 2], dtype=torch.int32)
    cu_k = torch.tensor([0, 7, 26], dtype=torch.int32)
    k8, v8 = cache_fp8_quant(k, ks), cache_fp8_quant(v, vs)
    args = dict(causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=1, max_seqlen_k=19)

    got = paged_decode(q, cache, table, lens, math="dequantized")
    f32 = torch.float32
    got32 = paged_decode(q.float(), cache, table, lens, math="dequantized")  # float64 math on any q
    assert got32.dtype == torch.float64 and torch.equal(got32, paged_decode(q.float().double(), cache, table, lens,
                                                                             math="dequantized"))
    want = attention_exact(q, k8.double() * torch.tensor(ks, dtype=f32).double(), v8.double() * torch.tensor(vs, dtype=f32).double(), **args)
    assert torch.equal(got, want)

    got = paged_decode(q, cache, table, lens, math="fa3_fp8", q_scale=qs)
    desc = lambda s: torch.full((2, heads_kv), s, dtype=f32)  # materialized, unlike vLLM's expand()
    fp8_args = (scaled_fp8_quant(q, qs), k8, v8, desc(qs), desc(ks), desc(vs))
    # vLLM's library at head dim 64: 128-key blocks, no split at these lengths, 13-bit MMA flushed every block
    want = attention_fa3_fp8(*fp8_args, block_n=128, num_splits=[1, 1],
                             accumulator=AccumulatorModel(13, promote_every=128), **args)
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)
    # what the caller passes FA3 as num_splits, per sequence as FA3 splits them: 8-key blocks, at most 3 splits
    got = paged_decode(q, cache, table, lens, q_scale=qs, block_n=8, num_splits=3, accumulator=None)
    assert fa3_decode_splits(lens, heads_kv, 8, num_splits=3) == [1, 3]
    assert torch.equal(got, attention_fa3_fp8(*fp8_args, block_n=8, num_splits=[1, 3], **args))


def test_paged_decode_bad_input():
    cache = PagedKVCache.allocate(2, 4, 1, 8, k_scale=0.5, v_scale=0.5)
    table, q = torch.tensor([[0]]), torch.randn(1, 2, 8)
    with pytest.raises(ValueError, match="needs the static q_scale"):
        paged_decode(q, cache, table, [3])
    with pytest.raises(ValueError, match="expected one of"):
        paged_decode(q, cache, table, [3], math="int8")
    with pytest.raises(ValueError, match="num_seqs=2"):
        paged_decode(q, cache, torch.tensor([[0], [1]]), [3, 2], q_scale=1.0)
    bf16 = PagedKVCache.allocate(2, 4, 1, 8, kv_cache_dtype="auto")
    with pytest.raises(ValueError, match="needs an FP8 cache"):
        paged_decode(q, bf16, table, [3], q_scale=1.0)
    for bad in (-1, True):
        with pytest.raises(ValueError, match="num_splits: expected None, an int >= 0"):
            paged_decode(q, cache, table, [3], q_scale=1.0, num_splits=bad)


@pytest.mark.parametrize("math", ["fa3_fp8", "dequantized"])
def test_an_empty_batch_is_refused_by_name(math):
    """No sequence: a named error, not torch.cat's "expected a non-empty list of Tensors"."""
    g = torch.Generator().manual_seed(23)
    cache = PagedKVCache.allocate(4, 4, 2, 16, k_scale=0.0173, v_scale=0.0219)
    k, v = torch.randn(5, 2, 16, generator=g), torch.randn(5, 2, 16, generator=g)
    table, slots = _random_pages(g, 4, [5], 4)
    cache.write(k, v, slots)
    empty_table, q = table[:0], torch.randn(0, 4, 16, generator=g)
    with pytest.raises(ValueError, match="seq_lens: expected at least one sequence, got 0"):
        cache.gather(empty_table, [])
    with pytest.raises(ValueError, match="seq_lens: expected at least one sequence, got 0"):
        paged_decode(q, cache, empty_table, [], math=math, q_scale=0.0131)
    assert paged_decode(torch.randn(1, 4, 16, generator=g), cache, table, [5], math=math, q_scale=0.0131).shape == (1, 4, 16)
    for bad in (-3, 2.5, True):  # a negative length made cu_seqlens run backwards, found only in attention
        with pytest.raises(ValueError, match=r"seq_lens: expected token counts, ints >= 0, got"):
            cache.gather(table, [bad])

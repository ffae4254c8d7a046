"""fp8lab.kvcache: vLLM's paged FP8 KV cache, written and read back."""

from pathlib import Path

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
        assert k_scale > 2 * v_scale  # one scale used for both tensors would show
        for out, x, scale in ((k_out, k, k_scale), (v_out, v, v_scale)):
            inv = 1.0 / torch.tensor(scale, dtype=torch.float32)
            assert torch.equal(out.double(), quantize((x.float() * inv).double(), "e4m3fn"))
            rel = (out.double() * scale - x).norm() / x.norm()
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
        (lambda: scaled_fp8_quant(torch.ones(2, dtype=torch.int32), 1.0), "expected a float tensor .* got int32"),
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


def test_fp8_or_nonfinite_input_is_refused():
    """Q, K or V already in FP8 would be divided by the scale a second time (a wrong answer, no error),
    and NaN or inf would be stored as NaN or ±448 without a word: each entry that quantizes refuses them."""
    g = torch.Generator().manual_seed(int(torch.randint(1 << 30, ())))
    lens, heads_kv, d = [3, 6], 2, 16
    cache = PagedKVCache.allocate(4, 4, heads_kv, d, k_scale=0.02, v_scale=0.03)
    table, slots = _random_pages(g, 4, lens, 4)
    k, v = torch.randn(sum(lens), heads_kv, d, generator=g), torch.randn(sum(lens), heads_kv, d, generator=g)
    q = torch.randn(len(lens), 4, d, generator=g)
    q8 = scaled_fp8_quant(q, 0.01)
    for call, name in ((lambda: scaled_fp8_quant(q8, 0.01), "scaled_fp8_quant"),
                       (lambda: cache_fp8_quant(cache_fp8_quant(k, 0.02), 0.02), "cache_fp8_quant"),
                       (lambda: cache.write(cache_fp8_quant(k, 0.02), v, slots), "key"),
                       (lambda: cache.write(k, cache_fp8_quant(v, 0.03), slots), "value"),
                       (lambda: paged_decode(q8, cache, table, lens, q_scale=0.01), "q"),
                       (lambda: paged_decode(q8, cache, table, lens, math="dequantized"), "q")):
        with pytest.raises(TypeError, match=rf"{name}: expected a float tensor .* got float8_e4m3fn \(already FP8"):
            call()
    bad_q, bad_k = q.clone(), k.clone()
    bad_q.view(-1)[int(torch.randint(q.numel(), (), generator=g))] = float("nan")
    bad_k.view(-1)[int(torch.randint(k.numel(), (), generator=g))] = float("inf")
    for call, name, what in ((lambda: scaled_fp8_quant(bad_q, 0.01), "scaled_fp8_quant", "1 NaN and 0 inf"),
                             (lambda: cache.write(bad_k, v, slots), "key", "0 NaN and 1 inf"),
                             (lambda: paged_decode(bad_q, cache, table, lens, q_scale=0.01), "q", "1 NaN and 0 inf")):
        with pytest.raises(ValueError, match=rf"{name}: expected finite values to quantize, got {what} values"):
            call()
    assert not cache.key_cache.view(torch.uint8).any()  # the refused writes left the cache as it was
    cache.write(k, v, slots)
    assert paged_decode(q, cache, table, lens, q_scale=0.01).shape == (2, 4, d)
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match=r"num_seqs: expected an int >= 0"):
            cache.descales(bad)


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


# ---------------------------------------------------------------------------
# Notebook 06's experiments


def _naive_decode(q, k, v, lens):
    """Per-sequence, per-head float64 softmax attention of one query over its keys; GQA by head // group."""
    group = q.shape[1] // k.shape[1]
    out, start = torch.zeros(q.shape, dtype=torch.float64), 0
    for i, n in enumerate(lens):
        for h in range(q.shape[1]):
            keys, vals = k[start:start + n, h // group].double(), v[start:start + n, h // group].double()
            p = torch.softmax(keys @ q[i, h].double() / q.shape[-1] ** 0.5, dim=0)
            out[i, h] = p @ vals
        start += n
    return out


def _batch(seed=3, lens=(9, 23), q_std=3.0, heads_q=4, heads_kv=2, d=16, block_size=4):
    g = torch.Generator().manual_seed(seed)
    return kvcache.DecodeBatch.draw(list(lens), heads_q=heads_q, heads_kv=heads_kv, head_dim=d, block_size=block_size,
                                    generator=g, q_std=q_std)


def test_memory_table_counts_bytes_and_tokens():
    table = kvcache.memory_table(32, 8, 128, 80.0)
    assert table["bytes/token"].tolist() == [2 * 32 * 8 * 128 * 2, 2 * 32 * 8 * 128]
    assert table["tokens in cache"].tolist() == [80 * 2**30 // b for b in table["bytes/token"]]
    assert table["stored as"].tolist() == ["bfloat16", "float8_e4m3fn"] and table["tokens vs first"].tolist() == [1, 2]
    with pytest.raises(ValueError, match="memory_gib"):
        kvcache.memory_table(32, 8, 128, 0)
    with pytest.raises(ValueError, match="memory_gib: expected GiB > 0, got inf"):
        kvcache.memory_table(32, 8, 128, float("inf"))
    with pytest.raises(ValueError, match="heads_kv: expected an int >= 1, got 0"):  # was a ZeroDivisionError
        kvcache.memory_table(32, 0, 128, 80.0)
    with pytest.raises(ValueError, match="kv_cache_dtypes: expected one or more names"):  # was a KeyError
        kvcache.memory_table(32, 8, 128, 80.0, kv_cache_dtypes=[])
    with pytest.raises(ValueError, match="kv_cache_dtypes: .* got 'fp8'"):  # not the letters 'f', 'p', '8'
        kvcache.memory_table(32, 8, 128, 80.0, kv_cache_dtypes="fp8")


def test_sizes_must_be_counts():
    """Zero, negative or fractional sizes are named, not a wrong byte count, a truncated length or a
    ZeroDivisionError / torch TypeError further in."""
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="num_layers: expected an int >= 1, got -1"):
        kv_bytes_per_token(-1, 8, 128, torch.bfloat16)
    with pytest.raises(ValueError, match="head_dim: expected an int >= 1, got 64.5"):
        kv_bytes_per_token(32, 8, 64.5, torch.bfloat16)
    with pytest.raises(ValueError, match="block_size: expected an int >= 1, got 16.0"):
        kvcache.random_pages([10, 20], 16.0, g)
    with pytest.raises(ValueError, match="context_lens: expected an int >= 0, got 10.5"):
        kvcache.random_pages([10.5, 20], 16, g)
    with pytest.raises(ValueError, match="num_blocks: expected an int >= 0, got 4.0"):  # was a torch TypeError
        PagedKVCache.allocate(4.0, 16, 2, 64)
    draw = dict(heads_q=4, heads_kv=2, head_dim=8, block_size=4, generator=g)
    with pytest.raises(ValueError, match="seq_lens: expected an int >= 0, got 10.7"):  # was truncated to 10
        kvcache.DecodeBatch.draw([10.7, 20], **draw)
    with pytest.raises(ValueError, match="heads_kv: expected an int >= 1, got 0"):  # was a ZeroDivisionError
        kvcache.DecodeBatch.draw([10, 20], **{**draw, "heads_kv": 0})
    with pytest.raises(ValueError, match="heads_q: expected an int >= 1, got 0"):  # was an empty q
        kvcache.DecodeBatch.draw([10, 20], **{**draw, "heads_q": 0})
    with pytest.raises(ValueError, match="max_batch: expected an int >= 1, got 0"):  # was "still splits at 0"
        kvcache.first_batch_without_splits(2000, 8, 96, max_batch=0)


def test_decode_batch_draws_pages_then_k_v_q_and_attends_exactly():
    g = torch.Generator().manual_seed(9)
    batch = kvcache.DecodeBatch.draw([5, 12], heads_q=4, heads_kv=2, head_dim=8, block_size=4, generator=g,
                                     k_outlier_channels=2, k_outlier_scale=10.0, q_std=2.0, v_std=0.5)
    g = torch.Generator().manual_seed(9)  # the same draws by hand, in the same order
    table, slots, num_blocks = kvcache.random_pages([5, 12], 4, g)
    k = torch.randn(17, 2, 8, generator=g, dtype=torch.float64)
    k[..., :2] *= 10
    v = torch.randn(17, 2, 8, generator=g, dtype=torch.float64) * 0.5
    q = torch.randn(2, 4, 8, generator=g, dtype=torch.float64) * 2
    assert torch.equal(batch.k, k) and torch.equal(batch.v, v) and torch.equal(batch.q, q)
    assert torch.equal(batch.block_table, table) and torch.equal(batch.slot_mapping, slots) and batch.num_blocks == num_blocks
    torch.testing.assert_close(batch.exact(), _naive_decode(q, k, v, [5, 12]), rtol=1e-12, atol=1e-12)
    # pages from their own generator: the page size moves the tokens, not the data
    other = kvcache.DecodeBatch.draw([5, 12], heads_q=4, heads_kv=2, head_dim=8, block_size=16,
                                     generator=torch.Generator().manual_seed(1), page_generator=torch.Generator())
    same = kvcache.DecodeBatch.draw([5, 12], heads_q=4, heads_kv=2, head_dim=8, block_size=4,
                                    generator=torch.Generator().manual_seed(1), page_generator=torch.Generator())
    assert torch.equal(other.k, same.k) and torch.equal(other.q, same.q) and other.block_size == 16
    cache = batch.cache(0.07, 0.011)
    k8, v8, cu = cache.gather(batch.block_table, batch.seq_lens)
    assert torch.equal(k8.double(), cache_fp8_quant(k, 0.07).double()) and cu.tolist() == [0, 5, 17]
    mild = batch.with_random_queries(0.1, torch.Generator().manual_seed(2))
    assert torch.equal(mild.k, batch.k) and mild.q.std() < 0.2 < batch.q.std()
    with pytest.raises(ValueError, match="query shape"):
        batch.with_queries(q[:1])
    with pytest.raises(ValueError, match="seq_lens"):
        kvcache.DecodeBatch.draw([], heads_q=4, heads_kv=2, head_dim=8, block_size=4, generator=g)


def test_value_ranges_and_scale_choices():
    x = torch.tensor([[3.0, -4.0]])
    assert kvcache.value_ranges(x=x).loc["x"].tolist() == pytest.approx([(12.5) ** 0.5, 4.0])
    batch = _batch()
    choices = kvcache.scale_choices(batch.q, batch.k, batch.v)
    amax = [t.abs().max().item() / 448 for t in (batch.q, batch.k, batch.v)]
    assert choices[kvcache.CHECKPOINT] == pytest.approx(amax)
    assert choices["checkpoint k/v only, vLLM (q 1.0)"] == pytest.approx((1.0, amax[1], amax[2]))
    assert choices["checkpoint k/v only, intended (q = k_scale)"] == pytest.approx((amax[1], amax[1], amax[2]))
    assert choices["default 1.0"] == (1.0, 1.0, 1.0)
    assert choices["dynamic (amax/200, /100)"] == vllm_dynamic_scales(batch.q, batch.k, batch.v)


def test_storage_table_counts_clipping_saturation_and_flushes():
    batch = _batch()
    ks, vs = batch.k.abs().max().item() / 448, batch.v.abs().max().item() / 448
    caches = kvcache.caches_for(batch, {"fits": (1.0, ks, vs), "k clips": (1.0, ks / 4, vs), "flushes": (1.0, 1.0, 1.0)})
    table = kvcache.storage_table(batch, caches).set_index(["scales", "tensor"])
    for (label, name), row in table.iterrows():
        x = batch.k if name == "K" else batch.v
        s = (caches[label][1].k_scale if name == "K" else caches[label][1].v_scale).item()
        stored = quantize((x.float() / torch.tensor(s)).double(), "e4m3fn") * s
        assert row["rel L2 of storage"] == pytest.approx(float((stored - x).norm() / x.norm()), rel=1e-6)
        assert row["flushed to 0 %"] == pytest.approx(100 * float(((stored == 0) & (x != 0)).double().mean()))
    assert table.loc[("fits", "K"), "clipped %"] == 0 and table.loc[("fits", "K"), "stored as ±448 %"] > 0
    assert table.loc[("k clips", "K"), "clipped %"] > 0
    assert table.loc[("k clips", "K"), "stored as ±448 %"] >= table.loc[("k clips", "K"), "clipped %"]
    assert table.loc[("flushes", "V"), "flushed to 0 %"] > 0 == table.loc[("fits", "V"), "clipped %"]


def test_decode_error_table_against_naive_attention():
    batch = _batch()
    choices = kvcache.scale_choices(batch.q, batch.k, batch.v)
    caches = kvcache.caches_for(batch, {k: choices[k] for k in (kvcache.CHECKPOINT, "default 1.0")})
    table = kvcache.decode_error_table(batch, caches)
    exact = _naive_decode(batch.q, batch.k, batch.v, batch.seq_lens)
    for label, (qs, cache) in caches.items():
        k8, v8, _ = cache.gather(batch.block_table, batch.seq_lens)
        deq = _naive_decode(batch.q, k8.double() * cache.k_scale.double(), v8.double() * cache.v_scale.double(),
                            batch.seq_lens)
        fa3 = paged_decode(batch.q, cache, batch.block_table, batch.seq_lens, q_scale=qs).double()
        row = table.loc[label]
        assert row["dequantized"] == pytest.approx(float((deq - exact).norm() / exact.norm()), rel=1e-9)
        assert row["fa3_fp8"] == pytest.approx(float((fa3 - exact).norm() / exact.norm()), rel=1e-9)
        assert row["fa3_fp8 vs dequantized"] == pytest.approx(float((fa3 - deq).norm() / deq.norm()), rel=1e-9)
        assert row["fa3_fp8 adds"] == pytest.approx(row["fa3_fp8"] / row["dequantized"] - 1)
        q_back = quantize((batch.q.float() * (1 / torch.tensor(qs))).double(), "e4m3fn") * qs
        assert row["Q cast rel L2"] == pytest.approx(float((q_back - batch.q).norm() / batch.q.norm()), rel=1e-6)
    storage = kvcache.storage_table(batch, caches)
    ranges = kvcache.decode_error_summary(table, storage)
    worst = storage["rel L2 of storage"].max()
    assert ranges["dequantized / storage"] == pytest.approx((table["dequantized"].min() / worst,
                                                             table["dequantized"].max() / worst))
    assert ranges["fa3_fp8 adds"] == (table["fa3_fp8 adds"].min(), table["fa3_fp8 adds"].max())


def test_attention_spread_counts_the_keys_that_carry_a_query():
    batch = _batch(lens=(6, 11))
    flat = batch.with_queries(torch.zeros_like(batch.q))  # equal scores: every key carries 1/n
    spread = kvcache.attention_spread(flat)
    assert spread.shape == (2, 4) and torch.allclose(spread, torch.tensor([[6.0] * 4, [11.0] * 4], dtype=torch.float64))
    sharp = batch.with_queries(batch.q * 1000)  # one key takes all
    assert torch.allclose(kvcache.attention_spread(sharp), torch.ones(2, 4, dtype=torch.float64), atol=1e-6)
    # against 1 / sum p^2 of the naive softmax
    k0 = batch.k[:6, 1].double()
    p = torch.softmax(k0 @ batch.q[0, 3] / 4, dim=0)
    assert kvcache.attention_spread(batch)[0, 3] == pytest.approx(float(1 / p.square().sum()))


def test_decode_error_split_sharp_against_mild():
    batch = _batch(lens=(40, 70), heads_q=4, heads_kv=2, d=32)
    mild = batch.with_random_queries(0.1, torch.Generator().manual_seed(4))
    split = kvcache.decode_error_split({"sharp": batch, "mild": mild})
    assert split.loc["sharp", "storage rel L2"] == split.loc["mild", "storage rel L2"]  # the same K and V
    assert split.loc["mild", "effective keys"] > 10 * split.loc["sharp", "effective keys"]
    for case in ("sharp", "mild"):
        row = split.loc[case]
        assert row["keys per query"] == 55
        assert row["dequantized / storage"] == pytest.approx(row["dequantized"] / row["storage rel L2"])
        assert row["fa3_fp8 vs dequantized / storage"] == pytest.approx(row["fa3_fp8 vs dequantized"] / row["storage rel L2"])
    # a flat softmax averages the roundings: the output loses about one; a sharp one amplifies it
    assert 0.5 < split.loc["mild", "dequantized / storage"] < 2 < split.loc["sharp", "dequantized / storage"]


def test_fa3_decode_call_has_stride0_descales_and_matches_materialized():
    batch = _batch()
    qs, cache = kvcache.caches_for(batch, {"ck": kvcache.scale_choices(batch.q, batch.k, batch.v)[kvcache.CHECKPOINT]})["ck"]
    call = kvcache.fa3_decode_call(batch, cache, qs)
    assert torch.equal(call.q8, scaled_fp8_quant(batch.q, qs)) and call.max_seqlen_k == 23
    assert call.cu_seqlens_q.tolist() == [0, 1, 2] and call.cu_seqlens_k.tolist() == [0, 9, 32]
    for d, s in zip(call.descales(), (qs, cache.k_scale.item(), cache.v_scale.item())):
        assert d.shape == (2, 2) and d.stride() == (0, 0) and d.dtype == torch.float32 and d[1, 1].item() == pytest.approx(s)
    assert kvcache.stride0_equals_materialized(call)
    assert call.varlen() == dict(cu_seqlens_q=call.cu_seqlens_q, cu_seqlens_k=call.cu_seqlens_k, max_seqlen_q=1,
                                 max_seqlen_k=23, causal=True)


def _graph_fakes():
    """A stand-in for a CUDA graph on the CPU: replay() reruns the captured function into its output."""
    from fp8lab.reference import attention_fa3_fp8

    class Graph:
        def __init__(self, fn, out):
            self.fn, self.out = fn, out

        def replay(self):
            self.out.copy_(self.fn())

    def capture(fn):
        fn()  # the warm-up call
        out = fn()
        return Graph(fn, out), out

    def attention(q, k, v, *, q_descale, k_descale, v_descale, **varlen):
        return attention_fa3_fp8(q, k, v, q_descale, k_descale, v_descale, **varlen)

    return capture, attention


def test_graph_replay_reads_the_new_query_and_lengths():
    from fp8lab.reference import attention_fa3_fp8

    batch = _batch(lens=(9, 23))
    qs, cache = kvcache.caches_for(batch, {"ck": kvcache.scale_choices(batch.q, batch.k, batch.v)[kvcache.CHECKPOINT]})["ck"]
    call = kvcache.fa3_decode_call(batch, cache, qs)
    next_q8 = scaled_fp8_quant(torch.randn(batch.q.shape, generator=torch.Generator().manual_seed(8)), qs)
    capture, attention = _graph_fakes()
    replayed = []

    def capture_and_keep(fn):
        graph, out = capture(fn)
        replayed.append(out)
        return graph, out

    assert kvcache.graph_replay_equals_eager(call, next_q8, [23, 9], device="cpu", attention=attention,
                                             capture=capture_and_keep)
    # the replay ran on the next query over the new lengths, not on what was captured
    want = attention_fa3_fp8(next_q8, call.k8, call.v8, *call.descales(), cu_seqlens_q=call.cu_seqlens_q,
                             cu_seqlens_k=torch.tensor([0, 23, 32], dtype=torch.int32), max_seqlen_q=1,
                             max_seqlen_k=23, causal=True)
    assert torch.equal(replayed[0], want)
    assert call.cu_seqlens_k.tolist() == [0, 9, 32]  # the caller's call is left alone

    def stale(fn):  # a graph whose replay does nothing: the check must notice
        graph, out = capture(fn)
        graph.replay = lambda: None
        return graph, out

    assert not kvcache.graph_replay_equals_eager(call, next_q8, [23, 9], device="cpu", attention=attention, capture=stale)
    with pytest.raises(ValueError, match="summing to the 32 cached tokens"):
        kvcache.graph_replay_equals_eager(call, next_q8, [20, 9], device="cpu", attention=attention, capture=capture)
    with pytest.raises(ValueError, match="none above max_seqlen_k=23"):
        kvcache.graph_replay_equals_eager(call, next_q8, [30, 2], device="cpu", attention=attention, capture=capture)
    with pytest.raises(ValueError, match="next_q8: expected torch.float8_e4m3fn .* got torch.float32"):
        # unquantized queries would be cast into the captured e4m3 query without their scale
        kvcache.graph_replay_equals_eager(call, next_q8.float() * qs, [23, 9], device="cpu", attention=attention,
                                          capture=capture)


def test_captured_varlen_providers_and_the_recorded_replays():
    table = kvcache.captured_varlen_providers(128).set_index("provider")
    assert table.loc["reference", "eager"] == "runs" and table.loc["reference", "captured"] == "no"
    assert "on the host" in table.loc["reference", "what capture adds"]
    assert table.loc["fa3-fwd", "captured"] == "runs" and table.loc["sdpa", "eager"] == "no"
    rec = kvcache.recorded_graph_replays(Path(__file__).resolve().parents[1] / "results" / "h200")
    assert len(rec) and "eager failed" not in set(rec["result"])
    assert rec["call"].tolist() == [f"{b} {'varlen' if v else 'batched'}" for b, v in zip(rec["backend"], rec["varlen"])]


def test_split_counts_table_follows_fa3_decode_splits():
    from fp8lab.reference import fa3_decode_splits

    assert kvcache.format_runs([3, 3, 3]) == "3 × 3" and kvcache.format_runs([2, 5]) == "2, 5"
    assert kvcache.format_runs([7]) == "7"
    cases = {"one": [8000], "mixed": [8000, 300], "many": [8000] * 16}
    table = kvcache.split_counts_table(cases, 8, 96)
    for name, lens in cases.items():
        splits = fa3_decode_splits(lens, 8, 96)
        row = table.loc[name]
        assert row["splits"] == splits and row["splits per sequence"] == kvcache.format_runs(splits)
        assert row["tiles without splits"] == 8 * len(lens) and row["tiles with splits"] == 8 * sum(splits)
    assert table.loc["mixed", "key blocks"] == "84, 4" and table.loc["one", "splits"][0] > 1


def test_split_effect_table_moves_bits_not_accuracy():
    from fp8lab.reference import fa3_decode_splits

    long = _batch(lens=(700,), heads_q=2, heads_kv=1, d=64, block_size=16)
    short = _batch(lens=(37,), heads_q=2, heads_kv=1, d=64, block_size=16)
    cases = {}
    for name, b in (("long", long), ("short", short)):
        qs, ks, vs = kvcache.scale_choices(b.q, b.k, b.v)[kvcache.CHECKPOINT]
        cases[name] = (b, b.cache(ks, vs), qs)
    table = kvcache.split_effect_table(cases)
    assert table.loc["long", "splits per sequence"] == kvcache.format_runs(fa3_decode_splits([700], 1, 128, group=2))
    assert table.loc["long", "splits per sequence"] != "1" and table.loc["short", "splits per sequence"] == "1"
    assert table.loc["short", "bf16 outputs equal"] == 1 and table.loc["long", "bf16 outputs equal"] < 1
    exact = long.exact()
    split = paged_decode(long.q, cases["long"][1], long.block_table, long.seq_lens, q_scale=cases["long"][2])
    assert table.loc["long", "rel L2, FA3's splits"] == pytest.approx(float((split.double() - exact).norm() / exact.norm()))
    assert table.loc["long", "rel L2, FA3's splits"] == pytest.approx(table.loc["long", "rel L2, no split"], rel=0.1)


def _validation():
    import pandas as pd

    return pd.DataFrame({
        "case": ["a", "a", "b", "a", "a"], "head_dim": [128] * 5, "num_splits": [0, 0, 0, 5, 5],
        "sequence": [0, 1, 0, 0, 1], "predicted_splits": [4, 1, 3, 4, 1],
        "equal_at_predicted": [0.8, 0.9, 0.7, 0.75, 0.9], "equal_without_split": [0.1, 0.9, 0.2, 0.1, 0.9]})


def test_decode_split_views_of_the_h200_record():
    val = _validation()
    assert kvcache.decode_split_eager_record(val) == {"predicted_splits": [4, 1, 3], "equal_at_predicted": [0.8, 0.9, 0.7],
                                                      "equal_without_split": [0.1, 0.9, 0.2]}
    points = kvcache.decode_split_points(val)
    assert len(points) == 6 and set(points["emulation"]) == {"split as predicted", "not split"}
    assert points[points.emulation == "not split"]["equal"].tolist() == [0.1, 0.9, 0.2]
    ranges = kvcache.decode_split_ranges(val)
    assert ranges == {"at predicted": (0.7, 0.8), "without split": (0.1, 0.2), "forced num_splits": [5],
                      "forced at predicted": 0.75}
    summary = kvcache.decode_split_summary(val)
    assert summary.loc[("a", 128), "sequences"] == 2 and summary.loc[("a", 128), "splits"] == "4, 1"
    assert summary.loc[("a", 128), "equal_at_predicted (split sequences, mean)"] == 0.8  # sequence 1 is not split
    with pytest.raises(ValueError, match="decode_split_record"):
        kvcache.decode_split_points(val.drop(columns="sequence"))
    from fp8lab.reference.experiments import decode_split_record

    recorded = decode_split_record(Path(__file__).resolve().parents[1] / "results" / "h200")
    eager = kvcache.decode_split_eager_record(recorded)
    assert len(eager["predicted_splits"]) == int((recorded.num_splits == 0).sum())


def test_exercise_helpers():
    v = torch.tensor([1.0, -2.0])
    choices = {"tight": (1.0, 1.0, 2 / 448), "loose": (1.0, 1.0, 1.0), "edge": (1.0, 1.0, 200 / 448)}
    assert kvcache.saturating_scales(choices, v, factor=100) == {"tight"}
    assert kvcache.saturating_scales(choices, v, factor=1) == set()
    batch = _batch()
    qs, cache = kvcache.caches_for(batch, {"ck": kvcache.scale_choices(batch.q, batch.k, batch.v)[kvcache.CHECKPOINT]})["ck"]
    same = kvcache.q_scale_misset(batch, cache, qs, factor=1)
    assert same == {"growth": pytest.approx(1.0), "saturated": 0.0}
    small = kvcache.q_scale_misset(batch, cache, qs, factor=8)
    assert small["saturated"] == pytest.approx(float((batch.q.abs() > 448 * qs / 8).double().mean()))
    assert small["growth"] > 1.5  # the clipped Q values are the largest scores
    first, splits = kvcache.first_batch_without_splits(2000, 8, 96)
    assert splits[first - 1] > 1 and all(s == 1 for b, s in splits.items() if b >= first)
    n = -(-2000 // 96)  # a sequence stays whole once ceil(1.1 * heads_kv * all key blocks / SMs) reaches its blocks
    assert first == next(b for b in range(1, 65) if -(-(1.1 * 8 * n * b) // 132) >= n)
    with pytest.raises(ValueError, match="raise max_batch"):
        kvcache.first_batch_without_splits(2000, 8, 96, max_batch=3)
    for factor in (0, -8.0, float("nan")):  # was a ZeroDivisionError, or a negative "scale" named
        with pytest.raises(ValueError, match="factor: expected a finite number > 0"):
            kvcache.q_scale_misset(batch, cache, qs, factor=factor)

"""Where fp8lab.attention's extra time goes (do_bench medians, variants of one call)."""
import json, statistics, sys, time
import torch
import fp8lab
from fp8lab import bench, env
from fp8lab.kernels import attention_ws as W
from fp8lab.layout import check_attention_inputs
import fa3_fwd_interface as fa3

rows = []
gen = torch.Generator(device="cuda").manual_seed(3)
for (b, s, h, d, causal) in ((4, 4096, 32, 64, False), (1, 16384, 32, 256, False)):
    q, k, v = ((torch.randn(b, s, h, d, device="cuda", generator=gen) * 3).to(torch.float8_e4m3fn) for _ in range(3))
    ds = {n: torch.rand(b, h, device="cuda", generator=gen) * 0.1 + 0.01 for n in ("q_descale", "k_descale", "v_descale")}
    kov = W.key_ordered_vt(v)
    ws = lambda: W.fp8_attention_ws(q, k, kov, causal=causal, **ds)
    variants = {
        "ws direct": ws,
        "key_ordered_vt + ws": lambda: W.fp8_attention_ws(q, k, W.key_ordered_vt(v), causal=causal, **ds),
        "sync + ws": lambda: (torch.cuda.synchronize(), ws()),
        "check_attention_inputs + ws": lambda: (check_attention_inputs(q, k, v, **ds), ws()),
        "api triton:gluon": lambda: fp8lab.attention(q, k, v, causal=causal, backend="triton:gluon", **ds),
        "fa3 direct": lambda: fa3.flash_attn_func(q, k, v, causal=causal, **ds),
        "sync + fa3": lambda: (torch.cuda.synchronize(), fa3.flash_attn_func(q, k, v, causal=causal, **ds)),
        "api fa3:fa3-fwd": lambda: fp8lab.attention(q, k, v, causal=causal, backend="fa3:fa3-fwd", **ds),
    }
    for rep in range(2):
        for name, fn in variants.items():
            fn()
            ms = bench.median_ms(fn)
            t = []
            for _ in range(20):
                torch.cuda.synchronize(); t0 = time.perf_counter(); fn(); torch.cuda.synchronize()
                t.append((time.perf_counter() - t0) * 1e3)
            rows.append(dict(case=f"{b}x{s}x{h}x{d}", rep=rep, variant=name, do_bench_ms=ms,
                             wall_ms_synced=statistics.median(t)))
            print(rows[-1], flush=True)
bench.write_results(sys.argv[1], rows, env.context(dtype="float8_e4m3fn"))

"""Where `fp8lab.attention`'s extra time goes: one call taken apart, at a short and a long case.

    PYTHONPATH=. python3 scripts/probe_api_overhead.py OUT.json

Variants of one FP8 attention call (4 x 4096 x 32 x 64 and 1 x 16384 x 32 x 256, non-causal): the
Gluon kernel on a prepared `key_ordered_vt`, with `key_ordered_vt` in the call, after a device
sync, after `check_attention_inputs` (its descale value check syncs), through
`fp8lab.attention(backend="triton:gluon")`; fa3-fwd directly, after a sync, and through
`fp8lab.attention(backend="fa3:fa3-fwd")`; since v27 also both through `fp8lab.prepare_attention`
(checked once, outside the timing). Per variant `do_bench`'s median and the median wall
time of 20 calls each between syncs; two interleaved repeats. Needs fa3-fwd.
"""

from __future__ import annotations

import sys

import fa3_fwd_interface as fa3
import torch
from probe_api_cost import host_ms  # scripts/ is on the path when run as a script

import fp8lab
from fp8lab import bench, env
from fp8lab.kernels import attention_ws as W
from fp8lab.layout import check_attention_inputs


def main(out: str) -> None:
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(3)
    for b, s, h, d, causal in ((4, 4096, 32, 64, False), (1, 16384, 32, 256, False)):
        q, k, v = ((torch.randn(b, s, h, d, device="cuda", generator=gen) * 3).to(torch.float8_e4m3fn) for _ in range(3))
        ds = {n: torch.rand(b, h, device="cuda", generator=gen) * 0.1 + 0.01
              for n in ("q_descale", "k_descale", "v_descale")}
        kov = W.key_ordered_vt(v)

        def ws():
            return W.fp8_attention_ws(q, k, kov, causal=causal, **ds)

        def fa3_direct():
            return fa3.flash_attn_func(q, k, v, causal=causal, **ds)

        variants = {
            "ws direct": ws,
            "key_ordered_vt + ws": lambda: W.fp8_attention_ws(q, k, W.key_ordered_vt(v), causal=causal, **ds),
            "sync + ws": lambda: (torch.cuda.synchronize(), ws()),
            "check_attention_inputs + ws": lambda: (check_attention_inputs(q, k, v, **ds), ws()),
            "api triton:gluon": lambda: fp8lab.attention(q, k, v, causal=causal, backend="triton:gluon", **ds),
            "fa3 direct": fa3_direct,
            "sync + fa3": lambda: (torch.cuda.synchronize(), fa3_direct()),
            "api fa3:fa3-fwd": lambda: fp8lab.attention(q, k, v, causal=causal, backend="fa3:fa3-fwd", **ds),
            "prepared triton:gluon": fp8lab.prepare_attention(q, k, v, causal=causal, backend="triton:gluon", **ds),
            "prepared fa3:fa3-fwd": fp8lab.prepare_attention(q, k, v, causal=causal, backend="fa3:fa3-fwd", **ds),
        }
        for rep in range(2):
            for name, fn in variants.items():
                fn()
                rows.append(dict(case=f"{b}x{s}x{h}x{d}", rep=rep, variant=name, do_bench_ms=bench.median_ms(fn),
                                 wall_ms_synced=host_ms(fn, 20, until_done=True)))
                print(rows[-1], flush=True)
    bench.write_results(out, rows, env.context(dtype="float8_e4m3fn"))


if __name__ == "__main__":
    main(sys.argv[1])

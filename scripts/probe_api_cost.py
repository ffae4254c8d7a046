"""What `fp8lab.attention` adds to a kernel's time, and what storing V keys-contiguous costs.

    PYTHONPATH=. python3 scripts/probe_api_cost.py OUT.json

V layouts: `pretranspose_v` and `key_ordered_vt` (Triton's `transpose_keys` on the GPU) against
the torch copies they replaced (`torch_pretranspose`, `torch_key_ordered`: v22's code),
same bytes checked, at the grid's V sizes (16k tokens x 32 kv heads x 64/128/256), `do_bench`
medians and CUDA-graph replays, three interleaved repeats; bandwidth counts reads plus writes.

The API's own cost at one grid case (4 x 4096 x 32 x 256, causal): host milliseconds of
`check_attention_inputs` (descale values: one device sync), of the backend decision, and of a
whole `fp8lab.attention` call less its kernel, each after a sync, medians of 50.
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from fp8lab import bench, env
from fp8lab.backends import api
from fp8lab.kernels import attention_ws as W
from fp8lab.kernels import pretranspose_v
from fp8lab.layout import check_attention_inputs


def torch_pretranspose(v: torch.Tensor) -> torch.Tensor:
    return v.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)


def torch_key_ordered(v: torch.Tensor) -> torch.Tensor:
    """v22's key_ordered_vt: zeros, a strided copy, a permuting copy."""
    b, s_k, hk, d = v.shape
    s_pad = -(-s_k // 32) * 32
    vt = torch.zeros((b, hk, d, s_pad), dtype=v.dtype, device=v.device)
    vt[..., :s_k] = v.permute(0, 2, 3, 1)
    vt = vt.reshape(b, hk, d, s_pad // 32, 2, 2, 4, 2).permute(0, 1, 2, 3, 4, 6, 5, 7).reshape(b, hk, d, s_pad)
    return vt.contiguous()


def host_ms(fn, n: int = 50, until_done: bool = False) -> float:
    """Median milliseconds of `fn()` started after a sync: until it returns (the host's part, the
    launch included), or with `until_done` until the GPU has finished it too."""
    times = []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if until_done:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(times)


def main(out: str) -> None:
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(5)
    for d in (64, 128, 256):
        v = (torch.randn(1, 16384, 32, d, device="cuda", generator=gen) * 40).to(torch.float8_e4m3fn)
        same = {
            "pretranspose_v": torch.equal(pretranspose_v(v).view(torch.uint8), torch_pretranspose(v).view(torch.uint8)),
            "key_ordered_vt": torch.equal(W.key_ordered_vt(v).data.view(torch.uint8),
                                          torch_key_ordered(v).view(torch.uint8)),
        }
        runs = {"pretranspose_v": (lambda: pretranspose_v(v), "pretranspose_v"),
                "torch pretranspose": (lambda: torch_pretranspose(v), "pretranspose_v"),
                "key_ordered_vt": (lambda: W.key_ordered_vt(v), "key_ordered_vt"),
                "torch key_ordered": (lambda: torch_key_ordered(v), "key_ordered_vt")}
        for rep in range(3):
            for name, (fn, kind) in runs.items():
                for how, timer in (("do_bench", bench.median_ms), ("graph", bench.median_ms_graph)):
                    ms = timer(fn)
                    rows.append(dict(part="v layout", rep=rep, head_dim=d, mib=v.numel() >> 20, op=name, timer=how,
                                     ms=ms, tbps=bench.tbps(2 * v.numel(), ms), same_bytes=same[kind]))
                    print(rows[-1], flush=True)
        del v

    b, s, h, d, causal = 4, 4096, 32, 256, True
    q, k, v = ((torch.randn(b, s, h, d, device="cuda", generator=gen) * 3).to(torch.float8_e4m3fn) for _ in range(3))
    ds = {n: torch.rand(b, h, device="cuda", generator=gen) * 0.1 + 0.01 for n in ("q_descale", "k_descale", "v_descale")}
    shape = check_attention_inputs(q, k, v, **ds)
    kov = W.key_ordered_vt(v)
    import fp8lab

    parts = {
        "check_attention_inputs": lambda: check_attention_inputs(q, k, v, **ds),
        "backend decision": lambda: api._decide(q, shape, "triton", False, "error"),
        "key_ordered_vt (launch)": lambda: W.key_ordered_vt(v),
        "fp8_attention_ws (launch)": lambda: W.fp8_attention_ws(q, k, kov, causal=causal, **ds),
        "fp8lab.attention triton (launch)": lambda: fp8lab.attention(q, k, v, causal=causal, backend="triton", **ds),
        "fp8lab.attention fa3:fa3-fwd (launch)": lambda: fp8lab.attention(q, k, v, causal=causal,
                                                                          backend="fa3:fa3-fwd", **ds),
    }
    for name, fn in parts.items():
        try:
            fn()
            rows.append(dict(part="api host", op=name, host_ms=host_ms(fn), case=f"{b}x{s}x{h}x{d} causal"))
        except Exception as e:  # noqa: BLE001
            rows.append(dict(part="api host", op=name, error=repr(e)[:300]))
        print(rows[-1], flush=True)
    bench.write_results(out, rows, env.context(dtype="float8_e4m3fn"))


if __name__ == "__main__":
    main(sys.argv[1])

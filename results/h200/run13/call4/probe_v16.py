"""run13's last probe (call 4, on the H200): the table waits of the on-chip kernels, paced
(SPIN_PAUSE_NS) and read in larger chunks by the warp-specialized kernel's waiter (WAIT_CHUNK).

    python3 results/h200/run13/probe_v16.py OUT.json

bf16 x (1 x tokens x heads x 128), per head (per tensor where a row says so), timed by
CUDA-graph replays (`bench.median_ms_graph`): useful bytes (3 per value) over a torch copy's
bandwidth at the same size, two interleaved repeats. Every row is checked against two passes'
bits (`same_bits`). "v15" is v15's waiting (no pause, 128 entries per read), which compiles to
v15's PTX. Calls 1-3 ran earlier probes (`call*/probe_v16.py`, with `calls1-3_kernel.patch`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import triton

import fp8lab.kernels.quantize_onchip as O
from fp8lab import bench
from fp8lab.kernels import quantize_fp8

VARIANTS = {"v15": dict(SPIN_PAUSE_NS=0, WAIT_CHUNK=128), "pause256": dict(SPIN_PAUSE_NS=256, WAIT_CHUNK=128),
            "pause1024": dict(SPIN_PAUSE_NS=1024, WAIT_CHUNK=128), "chunk256": dict(SPIN_PAUSE_NS=0, WAIT_CHUNK=256),
            "pause256 chunk256": dict(SPIN_PAUSE_NS=256, WAIT_CHUNK=256),
            "pause256 chunk512": dict(SPIN_PAUSE_NS=256, WAIT_CHUNK=512)}
CASES = [(16384, 32, 32, "head"), (16384, 32, 16, "head"), (32768, 16, 16, "head"), (16384, 32, 8, "head"),
         (16384, 8, 8, "head"), (16384, 4, 4, "tensor")]  # tokens, heads, kv heads, granularity


def main(out: str) -> None:
    gen = torch.Generator(device="cuda").manual_seed(17)
    rows = []
    xs = {c: torch.randn(1, c[0], c[1], 128, device="cuda", generator=gen, dtype=torch.bfloat16) for c in CASES}
    two = {c: quantize_fp8(x, c[3], heads_kv=c[2], schedule="two-pass") for c, x in xs.items()}
    for rep in range(2):
        for c, x in xs.items():
            n = x.numel()
            dst = torch.empty_like(x)
            copy_ms = bench.median_ms_graph(lambda: dst.copy_(x))
            copy_bw = bench.tbps(4 * n, copy_ms)
            rec = dict(rep=rep, tokens=c[0], heads=c[1], heads_kv=c[2], granularity=c[3], mib=2 * n >> 20,
                       copy_ms=copy_ms)
            fn = lambda: quantize_fp8(x, c[3], heads_kv=c[2], schedule="onchip")  # noqa: E731
            for name, knobs in VARIANTS.items():
                saved = {k: getattr(O, k) for k in knobs}
                try:
                    for k, v in knobs.items():
                        setattr(O, k, v)
                    y, d = fn()
                    same = bool(torch.equal(d, two[c][1]) and torch.equal(y.view(torch.uint8),
                                                                          two[c][0].view(torch.uint8)))
                    ms = bench.median_ms_graph(fn)
                    rows.append(dict(rec, kernel=name, same_bits=same, ms_graph=ms,
                                     frac_copy_graph=bench.tbps(3 * n, ms) / copy_bw))
                    print(f"{rep} {c} {name:<20} {ms * 1e3:7.1f} us {rows[-1]['frac_copy_graph']:.3f} bits {same}",
                          flush=True)
                except Exception as e:  # noqa: BLE001
                    rows.append(dict(rec, kernel=name, error=repr(e)[:300]))
                    print(f"{rep} {c} {name}: error {e!r:.300}", flush=True)
                finally:
                    for k, v in saved.items():
                        setattr(O, k, v)
            ms = bench.median_ms_graph(lambda: quantize_fp8(x, c[3], heads_kv=c[2], schedule="two-pass"))
            rows.append(dict(rec, kernel="two-pass", ms_graph=ms, frac_copy_graph=bench.tbps(3 * n, ms) / copy_bw))
            print(f"{rep} {c} two-pass             {ms * 1e3:7.1f} us {rows[-1]['frac_copy_graph']:.3f}", flush=True)
    info = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                sms=torch.cuda.get_device_properties(0).multi_processor_count)
    Path(out).write_text(json.dumps(dict(info, rows=rows), indent=1))


if __name__ == "__main__":
    main(sys.argv[1])

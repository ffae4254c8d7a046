"""run13's probe (v16, on the H200): parts spanning kv heads, one table read per part, and where the
warp-specialized on-chip kernel's time goes.

    python3 results/h200/run13/probe_v16.py OUT.json

Per-head quantization of bf16 x (1 x tokens x heads x 128) timed by CUDA-graph replays
(`bench.median_ms_graph`), useful bytes (3 per value) over a torch copy's bandwidth at the same
size, three interleaved repeats. Every row of the real kernel is checked against two passes'
bits (`same_bits`). The `diag` rows run copies of `fp8lab.kernels.quantize_onchip` with one step
switched off by a source edit (wrong bits by design; timing only):
- no-store: the cast warps compute every value but store none (a mask false at run time);
- no-cast: the cast warps hand each buffer back as soon as its descale arrives;
- no-amax: the amax warp publishes 1.0 without reading the part;
- loads-only: no-cast and no-amax (TMA loads, table round trips, hand-overs).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
from pathlib import Path

import torch
import triton

import fp8lab.kernels.quantize_onchip as O
from fp8lab import bench
from fp8lab.kernels import quantize_fp8

EDITS = {
    "no-store": [("gl.store(Y + offs, q, mask=gl.expand_dims(row < left, 1))",
                  "gl.store(Y + offs, q, mask=gl.expand_dims(row < left - 2000000000, 1))")],
    "no-cast": [("                _cast(bufs, buf, y_part, stride_yr, g, left, d, layout, BOX_ROWS, ROW_BOXES, G, D, SUB, PAIRS, W,\n"
                 "                      h, SPAN)",
                 "                if left < -7:\n"
                 "                    _cast(bufs, buf, y_part, stride_yr, g, left, d, layout, BOX_ROWS, ROW_BOXES, G, D, SUB,\n"
                 "                          PAIRS, W, h, SPAN)")],
    "no-amax": [("a = _part_amax(bufs, buf, left, layout, BOX_ROWS, ROW_BOXES, G, D, SUB, False, PAIRS, W, h, SPAN)",
                 "a = (left * 0).to(gl.float32) + 1.0"),
                ("a = _part_amax(bufs, buf, left, layout, BOX_ROWS, ROW_BOXES, G, D, SUB, True, PAIRS, W, h, SPAN)",
                 "a = (left * 0).to(gl.float32) + 1.0")],
}
EDITS["loads-only"] = EDITS["no-cast"] + EDITS["no-amax"]


def edited_module(name: str):
    """A copy of quantize_onchip with EDITS[name] applied (each edit must match once)."""
    src = Path(O.__file__).read_text()
    for old, new in EDITS[name]:
        assert src.count(old) >= 1, (name, old)  # the kernel's text changed: update EDITS
        src = src.replace(old, new)
    path = Path(tempfile.mkdtemp()) / f"onchip_{name.replace('-', '_')}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(f"onchip_{name.replace('-', '_')}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def run_onchip(mod, x, heads_kv, knobs):
    """quantize_fp8's on-chip path with `mod`'s kernel (plan and launch as quantize_fp8 makes them)."""
    b, s, h, d = x.shape
    for k, v in knobs.items():
        setattr(mod, k, v)
    plan = mod.onchip_plan(x, b, s, h, d, heads_kv, False, False)
    assert not isinstance(plan, str), plan
    y = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    cu = torch.zeros(1, dtype=torch.int32, device=x.device)
    return (lambda: mod.quantize_onchip(x, y, cu, b, s, h, heads_kv, False, plan)), plan


def main(out: str) -> None:
    gen = torch.Generator(device="cuda").manual_seed(16)
    rows = []
    mods = {name: edited_module(name) for name in EDITS}
    base = dict(WS=True, WS_FROM_BYTES=64 << 20, WS_CTAS_PER_SM=1, WS_BUFFERS=6, WS_SPAN=2, SPAN_BYTES=8 << 20,
                WAIT_CHUNK=512, WS_WORKER_REGS=192)
    real = {"ws v15 (span1 chunk128 regs128)": dict(base, WS_SPAN=1, WAIT_CHUNK=128, WS_WORKER_REGS=128),
            "ws span1": dict(base, WS_SPAN=1), "ws span2": base, "ws span2 regs128": dict(base, WS_WORKER_REGS=128),
            "ws span4 16MiB": dict(base, WS_SPAN=4, SPAN_BYTES=16 << 20), "v14": dict(base, WS=False)}
    shapes = [(16384, 32, 32), (16384, 16, 16), (32768, 16, 16), (16384, 32, 16), (16384, 32, 8)]  # tokens, heads, kv
    xs = {sh: torch.randn(1, sh[0], sh[1], 128, device="cuda", generator=gen, dtype=torch.bfloat16) for sh in shapes}
    two = {sh: quantize_fp8(x, "head", heads_kv=sh[2], schedule="two-pass") for sh, x in xs.items()}
    for rep in range(3):
        for sh, x in xs.items():
            n = x.numel()
            dst = torch.empty_like(x)
            copy_ms = bench.median_ms_graph(lambda: dst.copy_(x))
            copy_bw = bench.tbps(4 * n, copy_ms)
            rec = dict(rep=rep, tokens=sh[0], heads=sh[1], heads_kv=sh[2], mib=2 * n >> 20, copy_ms=copy_ms)
            cases = [(name, O, knobs) for name, knobs in real.items()]
            if sh == (16384, 32, 32):
                cases += [(f"diag {d} span2", mods[d], base) for d in EDITS]
            for name, mod, knobs in cases:
                saved = {k: getattr(mod, k) for k in knobs}
                try:
                    fn, plan = run_onchip(mod, x, sh[2], knobs)
                    y, d = fn()
                    same = None
                    if mod is O:
                        same = bool(torch.equal(d, two[sh][1]) and torch.equal(y.view(torch.uint8),
                                                                                two[sh][0].view(torch.uint8)))
                    ms = bench.median_ms_graph(fn)
                    rows.append(dict(rec, kernel=name, ws=plan.ws, span=plan.span, buffers=plan.buffers, grid=plan.grid,
                                     same_bits=same, ms_graph=ms, frac_copy_graph=bench.tbps(3 * n, ms) / copy_bw))
                    print(f"{rep} {sh} {name:<24} {ms * 1e3:7.1f} us {rows[-1]['frac_copy_graph']:.3f} bits {same}",
                          flush=True)
                except Exception as e:  # noqa: BLE001
                    rows.append(dict(rec, kernel=name, error=repr(e)[:300]))
                    print(f"{rep} {sh} {name}: error {e!r:.300}", flush=True)
                finally:
                    for k, v in saved.items():
                        setattr(mod, k, v)
            for name, fn in [("two-pass", lambda: quantize_fp8(x, "head", heads_kv=sh[2], schedule="two-pass")),
                             ("per-token", lambda: quantize_fp8(x, "token")),
                             ("torch amax (reads only)", lambda: torch.amax(x))]:
                ms = bench.median_ms_graph(fn)
                useful = 2 * n if "reads" in name else 3 * n
                rows.append(dict(rec, kernel=name, ms_graph=ms, frac_copy_graph=bench.tbps(useful, ms) / copy_bw))
                print(f"{rep} {sh} {name:<24} {ms * 1e3:7.1f} us {rows[-1]['frac_copy_graph']:.3f}", flush=True)
    info = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                sms=torch.cuda.get_device_properties(0).multi_processor_count)
    Path(out).write_text(json.dumps(dict(info, rows=rows), indent=1))


if __name__ == "__main__":
    main(sys.argv[1])

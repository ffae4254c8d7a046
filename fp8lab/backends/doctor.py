"""`fp8lab doctor`: what is here, and which kernel each kind of call would use.

Prints the environment, the GPU and its compute capability, every attention
provider (found or not, and why), vLLM's FlashAttention version rule applied
here, and the decision table for bf16 and FP8 inputs at each head dim.
`--json` prints the same as one JSON object; `--simulate 9.0` (or `cpu`) and
`--providers a,b` show the decisions for another device or provider set.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys

import torch

from fp8lab.backends import fetch, gating, providers

__all__ = ["HEAD_DIMS", "decision_table", "main", "report"]

# 64..256 are FA3's compiled tile sizes; 72 fails FP8's multiple-of-16 rule, 320 exceeds 256.
HEAD_DIMS = (64, 72, 96, 128, 192, 256, 320)
TABLE_DTYPES = ("bf16", "fp8")


def _environment() -> dict:
    try:
        from fp8lab import env

        return env.context()
    except Exception:  # noqa: BLE001 - doctor must work even when fp8lab.env breaks
        return {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda}


def _device(simulate: str | None) -> gating.Device:
    if simulate is None:
        if torch.cuda.is_available():
            return gating.Device(torch.cuda.get_device_capability(), torch.cuda.get_device_name())
        return gating.Device(None, "CPU")
    if simulate.lower() == "cpu":
        return gating.Device(None, "simulated CPU")
    try:
        major, minor = (int(x) for x in simulate.split("."))
    except ValueError:
        raise ValueError(f"--simulate: expected a compute capability like 9.0, or 'cpu', got {simulate!r}") from None
    return gating.Device((major, minor), f"simulated sm_{major}{minor}")


def decision_table(
    device: gating.Device,
    available: set[str],
    unavailable: dict[str, str] | None = None,
    head_dims: tuple[int, ...] = HEAD_DIMS,
    dtypes: tuple[str, ...] = TABLE_DTYPES,
    backend: str = "auto",
    env: dict[str, str] | None = None,
) -> list[dict]:
    """One row per (dtype, head_dim): the choice of `gating.decide` and the rejections."""
    rows = []
    for dtype in dtypes:
        for d in head_dims:
            dec = gating.decide(device, available, gating.Request(dtype, d), backend, env, unavailable)
            rows.append({"dtype": dtype, "head_dim": d, "choice": dec.label(), "backend": dec.backend,
                         "provider": dec.provider, "rejected": {k: list(v) for k, v in dec.rejected.items()}})
    return rows


def report(simulate: str | None = None, provider_names: list[str] | None = None) -> dict:
    """Everything `fp8lab doctor` shows, as a JSON-ready dict."""
    device = _device(simulate)
    probes = providers.probe_all()
    if provider_names is not None:
        unknown = set(provider_names) - set(gating.PROVIDERS)
        if unknown:
            raise ValueError(f"--providers: unknown {sorted(unknown)}; known: {list(gating.PROVIDERS)}")
        probes = {n: ((True, "simulated") if n in provider_names else (False, "simulated: not installed")) for n in gating.PROVIDERS}
    available = {n for n, (ok, _) in probes.items() if ok}
    unavailable = {n: why for n, (ok, why) in probes.items() if not ok}
    version, notes = gating.flash_attn_version(device.capability, available)
    lib, lib_detail = fetch.resolve_library()
    overrides = {k: v for k, v in os.environ.items()
                 if k in (gating.VERSION_ENV, fetch.LIB_ENV, "FP8LAB_CACHE_DIR", "TRITON_INTERPRET")
                 or (k.startswith("FP8LAB_") and k.endswith("_PROVIDERS"))}
    return {
        "environment": _environment(),
        "device": {"name": device.name, "capability": list(device.capability) if device.capability else None,
                   "architecture": gating.architecture(device.capability), "simulated": simulate is not None},
        "overrides": overrides,
        "flash_attn_version": {"version": version, "notes": notes,
                               "supports_fp8": gating.flash_attn_supports_fp8(device.capability, available)},
        "providers": [{"name": n, "backend": s.backend, "found": probes[n][0], "detail": probes[n][1],
                       "dtypes": list(s.dtypes), "summary": s.summary} for n, s in gating.PROVIDERS.items()],
        "vllm_fa3_library": {"path": str(lib) if lib else None, "detail": lib_detail,
                             "manifest": str(fetch.manifest_path())},
        "decisions": decision_table(device, available, unavailable),
        "notes": ([f"--simulate {simulate} without --providers decides with this machine's probes: providers that "
                   "need hardware this machine lacks count as missing; --providers a,b names the simulated "
                   "machine's installed set"] if simulate is not None and provider_names is None else []),
    }


def _print_text(rep: dict, verbose: bool, out=None) -> None:
    p = lambda *a: print(*a, file=out or sys.stdout)  # noqa: E731
    p("== environment (this machine)")
    for k, v in rep["environment"].items():
        p(f"  {k:20s} {v if v is not None else '-'}")
    dev = rep["device"]
    cap = ".".join(map(str, dev["capability"])) if dev["capability"] else "-"
    p(f"\n== device\n  {dev['name']}  capability {cap}  ({dev['architecture']}){'  [simulated]' if dev['simulated'] else ''}")
    if rep["overrides"]:
        p("\n== overrides")
        for k, v in rep["overrides"].items():
            p(f"  {k}={v}")
    p("\n== providers")
    for pr in rep["providers"]:
        mark = "found  " if pr["found"] else "missing"
        p(f"  {pr['backend']:9s} {pr['name']:13s} {mark} {pr['detail']}")
    lib = rep["vllm_fa3_library"]
    p(f"\n== vLLM FA3 library (fp8lab fa3 fetch; this machine)\n  {lib['detail']}\n  manifest {lib['manifest']}")
    fav = rep["flash_attn_version"]
    p(f"\n== FlashAttention version (vLLM's rule): {fav['version'] or 'none'}, FP8 supported: {fav['supports_fp8']}")
    for n in fav["notes"]:
        p(f"  - {n}")
    p("\n== decision table (backend='auto')")
    rows = {(r["dtype"], r["head_dim"]): r for r in rep["decisions"]}
    dtypes = list(dict.fromkeys(r["dtype"] for r in rep["decisions"]))
    p("  head_dim  " + "".join(f"{d:34s}" for d in dtypes))
    for hd in dict.fromkeys(r["head_dim"] for r in rep["decisions"]):
        p(f"  {hd:<8d}  " + "".join(f"{rows[(d, hd)]['choice']:34s}" for d in dtypes))
    for r in rep["decisions"]:
        if r["choice"] == "error" or verbose:
            p(f"\n  {r['dtype']} head_dim {r['head_dim']} -> {r['choice']}")
            for name, why in r["rejected"].items():
                p(f"    {name}: {'; '.join(why)}")
    if not verbose:
        p("\n  (--verbose says, for every row, why each provider before the chosen one was passed over)")
    for note in rep["notes"]:
        p(f"\n  note: {note}")


def main(argv: list[str] | None = None) -> int:
    """`fp8lab doctor [--json] [--verbose] [--simulate CAP|cpu] [--providers a,b,...]`; 0 on success."""
    ap = argparse.ArgumentParser(prog="fp8lab doctor", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--verbose", "-v", action="store_true", help="list every rejected provider for every row")
    ap.add_argument("--simulate", metavar="CAP", help="decide for another device: a compute capability like 8.9, or cpu")
    ap.add_argument("--providers", metavar="A,B", help="decide as if exactly these providers were installed")
    args = ap.parse_args(argv)
    try:
        names = None if args.providers is None else [n.strip() for n in args.providers.split(",")]
        if names is not None and not all(names):  # "" or "a,,b": not silently this machine's probes
            raise ValueError(f"--providers: expected provider names separated by commas, like fa3-fwd,sdpa, "
                             f"got {args.providers!r}")
        rep = report(args.simulate, names)
    except ValueError as e:
        print(f"fp8lab doctor: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(rep, indent=2, default=str))
    else:
        _print_text(rep, args.verbose)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

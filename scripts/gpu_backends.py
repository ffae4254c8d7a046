#!/usr/bin/env python3
"""Run the GPU backend suite (tests/test_gpu_backends.py) and write its summary with context.

    python3 scripts/gpu_backends.py --out results/h200 [--budget 200]

Writes into --out: gpu_tests.xml (junit), gpu_tests.csv (one row per test:
name, outcome, seconds, message), gpu_tests.json (context from fp8lab.env,
providers found, counts per provider and outcome), gpu_tests.errors.jsonl (measured
errors per case), gpu_tests.doctor.json and gpu_tests.log. --budget (seconds) makes tests
that would start later skip with a reason, so the run always ends with a summary.
Needs pytest; without it, it says so and exits 3.
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def summarize(xml_path: Path, out: Path) -> dict:
    rows = []
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = (el.get("message") or "")[:400]
        rows.append({"name": case.get("name"), "outcome": outcome, "seconds": float(case.get("time") or 0), "message": message})
    with open(out / "gpu_tests.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["name", "outcome", "seconds", "message"])
        w.writeheader()
        w.writerows(rows)
    from fp8lab.backends.gating import PROVIDERS

    names = sorted(PROVIDERS, key=len, reverse=True)  # "sdpa-flash" before "sdpa"
    per_provider: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in rows:
        params = r["name"].partition("[")[2].rstrip("]")
        provider = next((n for n in names if f"{n}-" in params + "-"), "-")
        per_provider[provider][r["outcome"]] += 1
    return {"total": collections.Counter(r["outcome"] for r in rows), "per_provider": per_provider}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget", type=float, default=200.0, help="seconds after which remaining tests skip")
    ap.add_argument("-k", dest="keyword", help="pytest -k expression (run a subset)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        import pytest  # noqa: F401
    except ImportError:
        print("pytest is not installed here: pip install pytest", file=sys.stderr)
        return 3
    sys.path.insert(0, str(ROOT))
    from fp8lab import env
    from fp8lab.backends import doctor, providers

    with open(args.out / "gpu_tests.doctor.json", "w") as f:
        json.dump(doctor.report(), f, indent=2, default=str)
    environ = dict(os.environ, FP8LAB_GPU_TEST_DEADLINE=str(time.time() + args.budget),
                   FP8LAB_GPU_TEST_LOG=str(args.out / "gpu_tests.errors.jsonl"))
    (args.out / "gpu_tests.errors.jsonl").unlink(missing_ok=True)
    t0 = time.time()
    with open(args.out / "gpu_tests.log", "w") as log:
        rc = subprocess.call([sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider",
                              str(ROOT / "tests" / "test_gpu_backends.py"), f"--junitxml={args.out / 'gpu_tests.xml'}",
                              *(["-k", args.keyword] if args.keyword else [])],
                             cwd=ROOT, env=environ, stdout=log, stderr=subprocess.STDOUT)
    wall = time.time() - t0
    summary = summarize(args.out / "gpu_tests.xml", args.out)
    ctx = env.context(suite="tests/test_gpu_backends.py", keyword=args.keyword, pytest_exit_code=rc, wall_seconds=round(wall, 1),
                      budget_seconds=args.budget)
    probes = {n: {"found": ok, "detail": d} for n, (ok, d) in providers.probe_all().items()}
    with open(args.out / "gpu_tests.json", "w") as f:
        json.dump({"context": ctx, "providers": probes, **summary}, f, indent=2, default=str)
    print(json.dumps({"exit": rc, "wall_s": round(wall, 1), **summary}, default=str, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`fp8lab fa3 fetch`: vLLM's FA3 library without installing vLLM.

vLLM's wheel carries FlashAttention-3 as one file,
`vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so`, built on torch's stable C ABI, so
it loads into other torch versions with `torch.ops.load_library` (see the facts
file, section 7). This command

1. downloads the vllm wheel of a version with `pip download --no-deps`
   (or takes a local wheel with `--wheel PATH`),
2. extracts that one file into fp8lab's cache
   (`$FP8LAB_CACHE_DIR`, else `$XDG_CACHE_HOME/fp8lab`, else `~/.cache/fp8lab`),
3. records its sha256 in `fa3/manifest.json` there.

fp8lab loads a library only if its sha256 matches the manifest, and for a vllm
version in `KNOWN_GOOD` (checked into the package) the fetch itself refuses a
file with another checksum. `FP8LAB_VLLM_FA3_LIB=/path/to/_vllm_fa3_C.abi3.so`
points at a file elsewhere; it too must match the manifest or `KNOWN_GOOD`.

Other routes to the FA3 kernels: `pip install fa3-fwd==0.0.3` (the `fa3` extra:
module `fa3_fwd_interface`) and `pip install vllm` (the `vllm` extra: all of vLLM,
which pins its own torch).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

__all__ = [
    "DEFAULT_VERSION",
    "KNOWN_GOOD",
    "LIB_ENV",
    "MEMBER",
    "cache_dir",
    "extract_library",
    "main",
    "manifest_path",
    "read_manifest",
    "resolve_library",
    "sha256_file",
]

DEFAULT_VERSION = "0.33.0"
MEMBER = "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so"
LIB_ENV = "FP8LAB_VLLM_FA3_LIB"
# sha256 and size of MEMBER in the PyPI wheel vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl,
# computed from the extracted file on 2026-11-29.
KNOWN_GOOD: dict[str, dict[str, object]] = {
    "0.33.0": {
        "sha256": "bcea1246912ed71467b008749057c798877fbf6fcee63eb056c5cc4b0beace17",
        "size": 172594888,
        "wheel": "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl",
    },
}


def cache_dir() -> Path:
    """fp8lab's cache: $FP8LAB_CACHE_DIR, else $XDG_CACHE_HOME/fp8lab, else ~/.cache/fp8lab."""
    if os.environ.get("FP8LAB_CACHE_DIR"):
        return Path(os.environ["FP8LAB_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fp8lab"


def manifest_path() -> Path:
    return cache_dir() / "fa3" / "manifest.json"


def sha256_file(path: str | Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def read_manifest() -> dict:
    """The manifest `{"format": 1, "libraries": [...]}`; empty when there is none."""
    p = manifest_path()
    if not p.exists():
        return {"format": 1, "libraries": []}
    try:
        data = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{p}: unreadable fp8lab manifest ({e}); delete it and run `fp8lab fa3 fetch` again") from e
    if not isinstance(data, dict) or not isinstance(data.get("libraries"), list):
        raise ValueError(f"{p}: not an fp8lab manifest (expected a 'libraries' list)")
    if not all(isinstance(e, dict) for e in data["libraries"]):
        raise ValueError(f"{p}: not an fp8lab manifest (expected a 'libraries' list of objects); "
                         "delete it and run `fp8lab fa3 fetch` again")
    return data


def _write_manifest(data: dict) -> None:
    p = manifest_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(p)


def _trusted_hashes(manifest: dict) -> dict[str, str]:
    """sha256 -> where it is vouched for (known-good table or manifest)."""
    trusted = {str(v["sha256"]): f"known-good vllm {k}" for k, v in KNOWN_GOOD.items()}
    for e in manifest["libraries"]:
        trusted.setdefault(str(e.get("sha256")), f"manifest entry for vllm {e.get('vllm_version')}")
    return trusted


def resolve_library() -> tuple[Path | None, str]:
    """The FA3 library to load, checksum verified: `(path, detail)`, or `(None, why not)`.

    `$FP8LAB_VLLM_FA3_LIB` first (its sha256 must be in the manifest or `KNOWN_GOOD`),
    then the most recent manifest entry whose file still has its recorded sha256.
    """
    try:
        manifest = read_manifest()
    except ValueError as e:
        return None, str(e)
    env_path = os.environ.get(LIB_ENV)
    if env_path:
        p = Path(env_path)
        if not p.is_file():
            return None, f"{LIB_ENV}={env_path} is not a file"
        digest = sha256_file(p)
        trusted = _trusted_hashes(manifest)
        if digest not in trusted:
            return None, (f"{LIB_ENV}={env_path} has sha256 {digest[:16]}..., which matches neither fp8lab's "
                          f"known-good table nor the manifest {manifest_path()}; refusing to load it")
        return p, f"{p} ({trusted[digest]})"
    entries = manifest["libraries"]
    if not entries:
        return None, f"no FA3 library: run `fp8lab fa3 fetch` or set {LIB_ENV} (cache: {cache_dir()})"
    for e in sorted(entries, key=lambda e: str(e.get("fetched", "")), reverse=True):
        p = Path(str(e.get("path", "")))
        if not p.is_file():
            continue
        known = KNOWN_GOOD.get(str(e.get("vllm_version")))
        if known and e.get("sha256") != known["sha256"]:
            return None, f"manifest entry for vllm {e.get('vllm_version')} disagrees with the known-good sha256; refusing"
        digest = sha256_file(p)
        if digest != e.get("sha256"):
            return None, (f"{p} has sha256 {digest[:16]}... but the manifest recorded {str(e.get('sha256'))[:16]}...: "
                          "the file changed since `fp8lab fa3 fetch`; refusing to load it")
        return p, f"{p} (vllm {e.get('vllm_version')})"
    return None, f"the manifest {manifest_path()} lists no file that still exists; run `fp8lab fa3 fetch` again"


def _wheel_version(wheel: Path) -> str | None:
    m = re.match(r"vllm-([^-]+)-", wheel.name)
    return m.group(1) if m else None


def extract_library(wheel: str | Path, version: str, dest_dir: str | Path | None = None) -> dict:
    """Copy `MEMBER` out of `wheel` into the cache, hashing as it goes; return its manifest entry.

    Raises ValueError if the wheel lacks the file or, for a version in `KNOWN_GOOD`,
    if its sha256 differs (nothing is left in the cache then).
    """
    wheel = Path(wheel)
    dest_dir = Path(dest_dir) if dest_dir else cache_dir() / "fa3" / f"vllm-{version}"
    try:
        zf = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as e:
        raise ValueError(f"{wheel}: not a readable wheel (zip): {e}") from e
    with zf:
        if MEMBER not in zf.namelist():
            raise ValueError(f"{wheel.name} has no {MEMBER}: not a CUDA vllm wheel, or vLLM moved its FA3 library")
        dest_dir.mkdir(parents=True, exist_ok=True)
        h, size = hashlib.sha256(), 0
        fd, tmp = tempfile.mkstemp(dir=dest_dir, suffix=".part")
        try:
            with zf.open(MEMBER) as src, os.fdopen(fd, "wb") as dst:
                while block := src.read(1 << 22):
                    h.update(block)
                    dst.write(block)
                    size += len(block)
            digest = h.hexdigest()
            known = KNOWN_GOOD.get(version)
            if known and digest != known["sha256"]:
                raise ValueError(f"{MEMBER} from {wheel.name} has sha256 {digest}, but vllm {version}'s known-good "
                                 f"sha256 is {known['sha256']}: refusing to cache it")
            final = dest_dir / Path(MEMBER).name
            os.replace(tmp, final)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    return {
        "name": Path(MEMBER).name,
        "vllm_version": version,
        "path": str(final.resolve()),
        "sha256": digest,
        "size": size,
        "source": wheel.name,
        "known_good": bool(KNOWN_GOOD.get(version)),
        "fetched": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
    }


# pip's socket timeout (s) and retries: without network, or with a stalled one, the fetch fails in about
# a minute, not after pip's own retries at $PIP_DEFAULT_TIMEOUT each; --pip-arg=--timeout=N comes after these
# and wins. A slow download that still moves is not cut off (the timeout is per read).
PIP_NETWORK_ARGS = ("--timeout", "15", "--retries", "2")


def download_wheel(version: str, dest: Path, pip_args: list[str] | None = None) -> Path:
    """`pip download --no-deps --only-binary=:all: vllm==version` into `dest`; the wheel's path."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", f"vllm=={version}", "-d", str(dest),
           *PIP_NETWORK_ARGS, *(pip_args or [])]
    print("running:", " ".join(cmd), flush=True)
    res = subprocess.run(cmd)
    if res.returncode != 0:
        raise RuntimeError(f"pip download failed (exit {res.returncode}; no network, or no such vllm wheel for "
                           "this platform?); try --wheel PATH with a wheel you downloaded")
    wheels = sorted(dest.glob(f"vllm-{version}-*.whl"))
    if not wheels:
        raise RuntimeError(f"pip download finished but left no vllm-{version}-*.whl in {dest}")
    return wheels[0]


def record(entry: dict) -> None:
    """Add `entry` to the manifest, replacing any entry for the same vllm version."""
    data = read_manifest()
    data["libraries"] = [e for e in data["libraries"] if e.get("vllm_version") != entry["vllm_version"]] + [entry]
    _write_manifest(data)


def main(argv: list[str] | None = None) -> int:
    """`fp8lab fa3 fetch [--version V] [--wheel PATH] [--cache-dir DIR] [--pip-arg ARG]...`; 0 on success."""
    ap = argparse.ArgumentParser(prog="fp8lab fa3 fetch", description=__doc__.split("\n\n")[0])
    ap.add_argument("--version", default=None, help=f"vllm version whose FA3 library to fetch (default {DEFAULT_VERSION})")
    ap.add_argument("--wheel", type=Path, help="use this local vllm wheel instead of downloading one")
    ap.add_argument("--cache-dir", type=Path, help="cache directory (default: $FP8LAB_CACHE_DIR, $XDG_CACHE_HOME/fp8lab, ~/.cache/fp8lab)")
    ap.add_argument("--pip-arg", action="append", default=[],
                    help="extra argument for pip download (repeatable; write --pip-arg=--timeout=60 for one that "
                         "starts with a dash)")
    args = ap.parse_args(argv)
    if args.cache_dir:
        os.environ["FP8LAB_CACHE_DIR"] = str(args.cache_dir)
    try:
        if args.wheel:
            if not args.wheel.is_file():
                raise ValueError(f"--wheel {args.wheel}: " + ("expected a vllm wheel file, got a folder"
                                                              if args.wheel.is_dir() else "no such file"))
            wheel_version = _wheel_version(args.wheel)
            if args.version and wheel_version and args.version != wheel_version:
                raise ValueError(f"--version {args.version} but {args.wheel.name} is vllm {wheel_version}")
            version = args.version or wheel_version
            if version is None:
                raise ValueError(f"{args.wheel.name}: cannot read a vllm version from the file name; pass --version")
            entry = extract_library(args.wheel, version)
        else:
            version = args.version or DEFAULT_VERSION
            with tempfile.TemporaryDirectory(prefix="fp8lab-fetch-") as tmp:
                entry = extract_library(download_wheel(version, Path(tmp), args.pip_arg), version)
        record(entry)
    except (ValueError, RuntimeError, OSError) as e:
        print(f"fp8lab fa3 fetch: {e}", file=sys.stderr)
        return 1
    trust = "matches fp8lab's known-good sha256" if entry["known_good"] else \
        "NOT in fp8lab's known-good table: recorded on first use, check it yourself"
    print(f"cached {entry['path']}\n  sha256 {entry['sha256']} ({trust})\n  manifest {manifest_path()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

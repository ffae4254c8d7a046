"""The `fp8lab` command.

    fp8lab info [--json]                versions, device, compute capability
    fp8lab doctor [--json] [--verbose] [--simulate CAP|cpu] [--providers A,B]
                                        providers found, and the backend decision table
    fp8lab notebooks list               the notebooks, in order
    fp8lab notebooks run [NAMES] [--smoke] [--out DIR] [--no-html] [--kernel K]
    fp8lab notebooks sync [NAMES] [--check]
    fp8lab fa3 fetch [--version V] [--wheel PATH]
                                        vLLM's FA3 library into fp8lab's cache

`fp8lab COMMAND --help` explains a command's options.
"""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["main"]


def _info(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fp8lab info", description="versions, device, compute capability")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    from fp8lab.env import context

    ctx = context()
    if args.json:
        print(json.dumps(ctx, indent=1))
    else:
        width = max(map(len, ctx))
        for key, value in ctx.items():
            print(f"{key:{width}s}  {value if value is not None else '-'}")
    return 0


def _doctor(argv: list[str]) -> int:
    from fp8lab.backends import doctor

    return doctor.main(argv)


def _notebooks(argv: list[str]) -> int:
    from fp8lab import notebooks

    return notebooks.main(argv)


def _fa3(argv: list[str]) -> int:
    if not argv or argv[0] != "fetch":
        usage = "usage: fp8lab fa3 fetch [--version V] [--wheel PATH] (fp8lab fa3 fetch --help: every option)"
        if argv and argv[0] in ("-h", "--help"):
            print(usage)
            return 0
        print(usage, file=sys.stderr)
        print(f"fp8lab fa3: expected the subcommand 'fetch', got {argv[0]!r}" if argv else
              "fp8lab fa3: expected the subcommand 'fetch'", file=sys.stderr)
        return 2
    from fp8lab.backends import fetch

    return fetch.main(argv[1:])


COMMANDS = {"info": _info, "doctor": _doctor, "notebooks": _notebooks, "fa3": _fa3}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print(__doc__.strip())
        if argv and argv[0] not in ("-h", "--help"):
            print(f"\nunknown command {argv[0]!r}; expected one of: {', '.join(COMMANDS)}", file=sys.stderr)
            return 2
        return 0
    return COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())

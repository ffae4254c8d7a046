"""Record what this torch's own FP8 casts do at the boundaries on a device (notebook 01, section 9).

    PYTHONPATH=. python3 scripts/probe_casts.py cuda OUT.json

`fp8lab.formats.probe_torch_casts` casts boundary inputs (500, 1e6, +-inf, NaN, ties, subnormals)
with `x.to(float8 dtype)` on the device and compares each result with `fp8lab.formats.quantize`
under both overflow policies; this writes its result with the machine's context, so a laptop can
show a GPU's behaviour beside its own.
"""

from __future__ import annotations

import json
import sys

from fp8lab import env, formats


def main(device: str, out: str) -> None:
    probe = formats.probe_torch_casts(device)
    with open(out, "w") as f:
        json.dump({"context": env.context(), **probe}, f, indent=1, default=str)
    print({name: info.get("overflow") for name, info in probe["formats"].items()})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

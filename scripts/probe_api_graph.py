"""Can `fp8lab.attention` be captured in a CUDA graph (as vLLM captures its decode steps)?

    PYTHONPATH=. python3 scripts/probe_api_graph.py OUT.json

For each GPU provider that runs here, a batched FP8 call (2 x 512 x 8 x 128, GQA 2, causal) and a
varlen one is captured, replayed after new values are copied into the inputs, and compared with
an eager call on those values. The varlen call is captured with lengths 412 and 612 and bounds of
612, and replayed with lengths 512 and 512 copied into cu_seqlens. Records what happened,
including the error of a capture that failed.
"""

from __future__ import annotations

import sys

import torch

import fp8lab
from fp8lab import bench, env


def main(out: str) -> None:
    gen = torch.Generator(device="cuda").manual_seed(5)
    rows = []

    def fresh(b, s, h, hk, d):
        q = (torch.randn(b, s, h, d, device="cuda", generator=gen) * 2).to(torch.float8_e4m3fn)
        k, v = ((torch.randn(b, s, hk, d, device="cuda", generator=gen) * 2).to(torch.float8_e4m3fn) for _ in range(2))
        ds = [torch.rand(b, hk, device="cuda", generator=gen) * 0.1 + 0.01 for _ in range(3)]
        return q, k, v, ds

    for backend in ("fa3:fa3-fwd", "fa3:vllm", "fa3:vllm-so", "triton:gluon", "triton:triton"):
        for varlen in (False, True):
            b, s, h, hk, d = 2, 512, 8, 4, 128
            q, k, v, ds = fresh(b, s, h, hk, d)
            kw = dict(causal=True, backend=backend)
            if varlen:
                q, k, v = (t.reshape(b * s, *t.shape[2:]) for t in (q, k, v))
                cu = torch.tensor([0, s - 100, 2 * s], dtype=torch.int32, device="cuda")
                kw.update(cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=s + 100, max_seqlen_k=s + 100)

            def call():
                return fp8lab.attention(q, k, v, q_descale=ds[0], k_descale=ds[1], v_descale=ds[2], **kw)

            row = dict(backend=backend, varlen=varlen)
            try:
                call()  # eager first: compiles, and says whether the provider runs here at all
            except Exception as e:  # noqa: BLE001
                rows.append({**row, "result": "eager failed", "error": repr(e)[:400]})
                print(rows[-1], flush=True)
                continue
            try:
                graph, captured = bench.capture_graph(call)
                q2, k2, v2, ds2 = fresh(b, s, h, hk, d)
                for dst, src in zip((q, k, v, *ds), (q2, k2, v2, *ds2)):
                    dst.copy_(src.reshape(dst.shape))
                if varlen:
                    cu.copy_(torch.tensor([0, s, 2 * s], dtype=torch.int32))
                graph.replay()
                torch.cuda.synchronize()
                eager = call()
                row.update(result="captured", replay_equals_eager=bool(torch.equal(captured, eager)),
                           eager_lengths=cu.tolist() if varlen else None)
            except Exception as e:  # noqa: BLE001
                row.update(result="capture failed", error=repr(e)[:400])
                torch.cuda.synchronize()
            rows.append(row)
            print(rows[-1], flush=True)
    bench.write_results(out, rows, env.context(dtype="float8_e4m3fn"))


if __name__ == "__main__":
    main(sys.argv[1])

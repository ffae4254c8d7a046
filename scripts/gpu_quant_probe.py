"""Where the quantization kernels' time goes on a GPU: each variant once, after a warm-up, at
128 MiB and 32 MiB of bf16. Run it under Nsight Compute for DRAM bytes and L2 hit rates:

    ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,\\
gpu__time_duration.sum python3 scripts/gpu_quant_probe.py

Without ncu it prints CUDA-graph timings of the same calls."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch  # noqa: E402

import fp8lab.kernels.quantize as Q  # noqa: E402
from fp8lab import bench  # noqa: E402

VARIANTS = {
    "static": lambda x: Q.quantize_fp8_static(x, 0.05),
    "head two-pass": lambda x: Q.quantize_fp8(x, "head", schedule="two-pass"),
    "head fused": lambda x: Q.quantize_fp8(x, "head", schedule="fused"),
    "tensor two-pass": lambda x: Q.quantize_fp8(x, "tensor", schedule="two-pass"),
    "tensor fused": lambda x: Q.quantize_fp8(x, "tensor", schedule="fused"),
}


if __name__ == "__main__":
    timed = "--time" in sys.argv
    for heads in (32, 8):
        x = torch.randn(1, 16384, heads, 128, device="cuda", dtype=torch.bfloat16)
        for name, fn in VARIANTS.items():
            fn(x)
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_push(f"{name} {heads} heads")
            fn(x)
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()
            if timed:
                print(f"{heads:>3} heads  {name:<32} {bench.median_ms_graph(lambda: fn(x)) * 1e3:7.1f} us", flush=True)

#!/bin/bash
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
{ nvidia-smi --query-gpu=name,driver_version --format=csv; python3 -c "import torch, triton, sys; print(torch.__version__, triton.__version__, torch.version.cuda, sys.version)"; } > $OUT/gpu.txt 2>&1
timeout 200 python3 scripts/gpu_bench.py --quant-shapes --out $OUT > $OUT/bench_quant_shapes.log 2>&1; echo "rc=$?" >> $OUT/bench_quant_shapes.log
tail -12 $OUT/bench_quant_shapes.log
timeout 300 python3 -m pytest -q tests/test_kernels_quantize.py -p no:cacheprovider > $OUT/tests.log 2>&1; echo "rc=$?" >> $OUT/tests.log
tail -5 $OUT/tests.log

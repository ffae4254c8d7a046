#!/bin/bash
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
{ nvidia-smi --query-gpu=name,driver_version --format=csv; python3 -c "import torch, triton, sys; print(torch.__version__, triton.__version__, torch.version.cuda, sys.version)"; } > $OUT/gpu.txt 2>&1
timeout 80 python3 scripts/probe_quant_head_major.py $OUT/probe_head_major.json > $OUT/probe_head_major.log 2>&1; echo "rc=$?" >> $OUT/probe_head_major.log
cat $OUT/probe_head_major.log
timeout 200 python3 -m pytest -q tests/test_kernels_quantize.py > $OUT/tests.log 2>&1; echo "rc=$?" >> $OUT/tests.log
tail -15 $OUT/tests.log

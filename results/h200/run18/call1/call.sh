#!/bin/bash
# run18 call 1: L2 prefetch beyond the on-chip quantization kernel's buffers (../call2/probe_quant_prefetch.py, with
# the kernel edit of prefetch_bulk.py (cp.async.bulk.prefetch.L2, one per row))
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" > $OUT/gpu.txt 2>&1
nvidia-smi --query-gpu=driver_version,name --format=csv >> $OUT/gpu.txt 2>&1
timeout 480 python3 scripts/probe_quant_prefetch.py $OUT/probe_prefetch.json > $OUT/probe_prefetch.log 2>&1; echo "rc=$?" >> $OUT/probe_prefetch.log
cp scripts/probe_quant_prefetch.py $OUT/
tail -80 $OUT/probe_prefetch.log

#!/bin/bash
# run19 call 6: copy and static quantization bandwidth by size (scripts/probe_copy_sizes.py)
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv; python3 -c "import torch, triton, sys; print(torch.__version__, triton.__version__, torch.version.cuda, sys.version)"; } > $OUT/gpu.txt 2>&1
timeout 300 python3 scripts/probe_copy_sizes.py $OUT/probe_copy_sizes.json > $OUT/probe.log 2>&1; echo "rc=$?" >> $OUT/probe.log
cp scripts/_call.sh $OUT/call.sh
tail -n 62 $OUT/probe.log

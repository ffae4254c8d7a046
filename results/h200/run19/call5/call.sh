#!/bin/bash
# run19 call 5: pass 2 backwards with L2 eviction hints on top (scripts/probe_quant_evict.py)
set -u
export PYTHONPATH=$PWD:$PWD/scripts PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import torch, triton, sys; print(torch.__version__, triton.__version__, torch.version.cuda, sys.version)"; } > $OUT/gpu.txt 2>&1
timeout 400 python3 scripts/probe_quant_evict.py $OUT/probe_quant_evict.json > $OUT/probe.log 2>&1; echo "rc=$?" >> $OUT/probe.log
cp scripts/_call.sh $OUT/call.sh
tail -n 60 $OUT/probe.log

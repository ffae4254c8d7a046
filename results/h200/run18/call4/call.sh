#!/bin/bash
# run18 call 4: part size and buffers of the warp-specialized on-chip kernel (_probe_parts.py, kept here)
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" > $OUT/gpu.txt 2>&1
timeout 300 python3 scripts/_probe_parts.py $OUT/probe_parts.json > $OUT/probe_parts.log 2>&1; echo "rc=$?" >> $OUT/probe_parts.log
cp scripts/_probe_parts.py $OUT/
cat $OUT/probe_parts.log

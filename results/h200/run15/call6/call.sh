#!/bin/bash
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
{ nvidia-smi --query-gpu=name,driver_version --format=csv; python3 -c "import torch, triton, sys; print(torch.__version__, triton.__version__, torch.version.cuda, sys.version)"; } > $OUT/gpu.txt 2>&1
timeout 200 python3 scripts/probe_quant_table.py $OUT/probe_table.json > $OUT/probe_table.log 2>&1; echo "rc=$?" >> $OUT/probe_table.log
cat $OUT/probe_table.log

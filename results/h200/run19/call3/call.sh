#!/bin/bash
# run19 call 3: notebook 07 as a script with run_live=True (the live cell: both fp8lab kernels in interleaved rounds)
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import torch, triton, sys; print(torch.__version__, triton.__version__, torch.version.cuda, sys.version)"; } > $OUT/gpu.txt 2>&1
for L in 8192 16384; do
timeout 250 python3 -c "from fp8lab import notebooks; notebooks.run_script('07_performance', run_live=True, live_seqlen=$L, live_head_dim=256)" > $OUT/nb07_live_$L.log 2>&1; echo "rc=$?" >> $OUT/nb07_live_$L.log
done
cp scripts/_call.sh $OUT/call.sh
grep -B2 -A6 "live, median" $OUT/nb07_live_*.log; tail -3 $OUT/nb07_live_*.log

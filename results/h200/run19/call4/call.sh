#!/bin/bash
# run19 call 4: two-pass quantization with pass 2 walking x backwards (scripts/probe_quant_reverse.py)
set -u
export PYTHONPATH=$PWD:$PWD/scripts PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import torch, triton, sys; print(torch.__version__, triton.__version__, torch.version.cuda, sys.version)"; } > $OUT/gpu.txt 2>&1
timeout 300 python3 scripts/probe_quant_reverse.py $OUT/probe_quant_reverse.json > $OUT/probe.log 2>&1; echo "rc=$?" >> $OUT/probe.log
timeout 200 python3 -m pytest -q -x tests/test_kernels_quantize.py > $OUT/tests.log 2>&1; echo "rc=$?" >> $OUT/tests.log
cp scripts/_call.sh $OUT/call.sh
tail -n 50 $OUT/probe.log; tail -n 3 $OUT/tests.log

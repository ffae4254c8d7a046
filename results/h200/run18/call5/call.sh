#!/bin/bash
# run18 call 5: 4 against 8 cast warps (_probe_ws_warps.py), then the quantization test file with WS_WARPS = 8
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" > $OUT/gpu.txt 2>&1
timeout 200 python3 scripts/_probe_ws_warps.py $OUT/probe_ws_warps.json > $OUT/probe_ws_warps.log 2>&1; echo "rc=$?" >> $OUT/probe_ws_warps.log
cp scripts/_probe_ws_warps.py $OUT/
timeout 280 python3 -m pytest -q tests/test_kernels_quantize.py -p no:cacheprovider > $OUT/tests.log 2>&1; echo "rc=$?" >> $OUT/tests.log
cat $OUT/probe_ws_warps.log; tail -4 $OUT/tests.log

#!/bin/bash
# run17 call 6: v21's defaults (the counter for causal attention) under the GPU tests that run the key-ordered default
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" > $OUT/gpu.txt 2>&1
timeout 170 python3 -m pytest -q -x -m gpu tests/test_kernels_attention_ws.py -p no:cacheprovider -k "key_ordered_v_gives" > $OUT/tests.log 2>&1; echo "rc=$?" >> $OUT/tests.log
cat $OUT/tests.log | tail -4

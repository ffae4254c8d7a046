#!/bin/bash
# run20 call 5: the Triton provider's batched FP8 cases on the final code
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
mkdir -p $OUT/suite
timeout 170 python3 scripts/gpu_backends.py --out $OUT/suite --budget 150 -k "triton and fp8 and batched" > $OUT/suite/run.log 2>&1; echo "rc=$?" >> $OUT/suite/run.log
cp scripts/_call.sh $OUT/call.sh
tail -16 $OUT/suite/run.log

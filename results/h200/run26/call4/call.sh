#!/usr/bin/env bash
set -u
mkdir -p $OUT/c
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD:$PWD/scripts PYTHONUNBUFFERED=1 MPLBACKEND=Agg
cp scripts/_call.sh $OUT/c/call.sh
(nvidia-smi; python3 -c "import torch,triton;print(torch.__version__,triton.__version__)") > $OUT/c/gpu.txt 2>&1
t0=$SECONDS
timeout 290 python3 -m pytest -q tests/test_kernels_attention_ws.py -k "transpose_v" -p no:cacheprovider -rs --durations=5 > $OUT/c/tests_tv.log 2>&1; echo "tv tests rc=$? $((SECONDS-t0))s"
tail -12 $OUT/c/tests_tv.log
t0=$SECONDS
timeout 110 python3 -m pytest -q tests/test_kernels_attention_ws.py -k "key_ordered_v_gives or dynamic_tiles_replay" -p no:cacheprovider -rs > $OUT/c/tests_more.log 2>&1; echo "more rc=$? $((SECONDS-t0))s"
tail -5 $OUT/c/tests_more.log
cd $OUT && tar czf c.tgz c && rm -rf c

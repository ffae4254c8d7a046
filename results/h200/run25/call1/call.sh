#!/usr/bin/env bash
set -u
mkdir -p $OUT/c
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
cp scripts/_call.sh $OUT/c/call.sh
(nvidia-smi; python3 -c "import torch,triton;print(torch.__version__,triton.__version__)") > $OUT/c/gpu.txt 2>&1
t0=$SECONDS
timeout 220 python3 scripts/probe_quant_buffers.py $OUT/c/probe_quant_buffers.json > $OUT/c/probe_quant_buffers.log 2>&1; echo "probe rc=$? $((SECONDS-t0))s"
cat $OUT/c/probe_quant_buffers.log | tail -60
t0=$SECONDS
timeout 320 python3 -m pytest -q tests/test_kernels_attention_ws.py -k "key_ordered_v_gives" -p no:cacheprovider -rs --durations=5 > $OUT/c/tests_ws_key_ordered.log 2>&1; echo "ws key-ordered rc=$? $((SECONDS-t0))s"
tail -12 $OUT/c/tests_ws_key_ordered.log
cd $OUT && tar czf c.tgz c && rm -rf c

#!/bin/bash
# run20 call 1: the gluon provider through the GPU backend suite, the Gluon file, and the grid through fp8lab.attention
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
xz -dc .gpu/_vllm_fa3_C.abi3.so.xz > /tmp/_vllm_fa3_C.abi3.so && export FP8LAB_VLLM_FA3_LIB=/tmp/_vllm_fa3_C.abi3.so
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import torch, triton, sys; print(torch.__version__, triton.__version__, torch.version.cuda, sys.version)"; } > $OUT/gpu.txt 2>&1
mkdir -p $OUT/suite $OUT/api
timeout 200 python3 scripts/gpu_backends.py --out $OUT/suite --budget 170 -k "gluon" > $OUT/suite/run.log 2>&1; echo "rc=$?" >> $OUT/suite/run.log
timeout 150 python3 -m pytest -q tests/test_kernels_attention_ws.py -k "key_ordered or persistent or cuda_graph" > $OUT/ws_tests.log 2>&1; echo "rc=$?" >> $OUT/ws_tests.log
Q=$(python3 -c "from fp8lab.bench import CLOCK_LOG_QUERY; print(CLOCK_LOG_QUERY)")
nvidia-smi --query-gpu=$Q --format=csv -lms 100 > $OUT/api/clocks.csv 2>&1 &
SMI=$!
timeout 270 python3 scripts/gpu_bench.py --api-grid --repeats 5 --settle 1.5 --budget 260 --out $OUT/api > $OUT/api/grid.log 2>&1; echo "rc=$?" >> $OUT/api/grid.log
kill $SMI
cp scripts/_call.sh $OUT/call.sh
{ tail -15 $OUT/suite/run.log; tail -5 $OUT/ws_tests.log; tail -45 $OUT/api/grid.log; } > $OUT/tail.txt
(cd $OUT && tar czf all.tgz suite api ws_tests.log && rm -rf suite api)
cat $OUT/tail.txt

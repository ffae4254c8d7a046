#!/bin/bash
# run20 call 2: V layouts and the API's cost (probe), GPU tests of the changed paths, the grid through fp8lab.attention again
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
xz -dc .gpu/_vllm_fa3_C.abi3.so.xz > /tmp/_vllm_fa3_C.abi3.so && export FP8LAB_VLLM_FA3_LIB=/tmp/_vllm_fa3_C.abi3.so
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import torch, triton, sys; print(torch.__version__, triton.__version__, torch.version.cuda, sys.version)"; } > $OUT/gpu.txt 2>&1
mkdir -p $OUT/suite $OUT/api
timeout 80 python3 scripts/probe_api_cost.py $OUT/probe_api_cost.json > $OUT/probe.log 2>&1; echo "rc=$?" >> $OUT/probe.log
timeout 150 python3 -m pytest -q tests/test_kernels_vlayout.py tests/test_kernels_attention_ws.py -k "vlayout or transpose_keys or torch_bytes or persistent or key_ordered or cuda_graph" > $OUT/tests.log 2>&1; echo "rc=$?" >> $OUT/tests.log
timeout 110 python3 scripts/gpu_backends.py --out $OUT/suite --budget 95 -k "gluon or (triton and fp8 and d128) or (triton and varlen)" > $OUT/suite/run.log 2>&1; echo "rc=$?" >> $OUT/suite/run.log
Q=$(python3 -c "from fp8lab.bench import CLOCK_LOG_QUERY; print(CLOCK_LOG_QUERY)")
nvidia-smi --query-gpu=$Q --format=csv -lms 100 > $OUT/api/clocks.csv 2>&1 &
SMI=$!
timeout 205 python3 scripts/gpu_bench.py --api-grid --repeats 5 --settle 1.5 --budget 195 --out $OUT/api > $OUT/api/grid.log 2>&1; echo "rc=$?" >> $OUT/api/grid.log
kill $SMI
cp scripts/_call.sh $OUT/call.sh
{ grep -v "^{'part': 'v layout'" $OUT/probe.log | tail -8; tail -4 $OUT/tests.log; tail -16 $OUT/suite/run.log; tail -45 $OUT/api/grid.log; } > $OUT/tail.txt
(cd $OUT && tar czf all.tgz suite api tests.log probe.log && rm -rf suite api)
cat $OUT/tail.txt

#!/bin/bash
# run19 call 2: the v23 grid without the settle first (compiles leave the card idle; round 0 meets the swing), then with it
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
xz -dc .gpu/_vllm_fa3_C.abi3.so.xz > /tmp/_vllm_fa3_C.abi3.so && export FP8LAB_VLLM_FA3_LIB=/tmp/_vllm_fa3_C.abi3.so
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import torch, triton, sys; print(torch.__version__, triton.__version__, torch.version.cuda, sys.version)"; } > $OUT/gpu.txt 2>&1
Q=$(python3 -c "from fp8lab.bench import CLOCK_LOG_QUERY; print(CLOCK_LOG_QUERY)")
nvidia-smi --query-gpu=$Q --format=csv -lms 100 > $OUT/clocks.csv 2>&1 &
SMI=$!
mkdir -p $OUT/g1 $OUT/g2
timeout 280 python3 scripts/gpu_bench.py --v23-grid --repeats 5 --settle 0 --budget 270 --out $OUT/g1 > $OUT/g1/grid.log 2>&1; echo "rc=$?" >> $OUT/g1/grid.log
timeout 250 python3 scripts/gpu_bench.py --v23-grid --repeats 5 --settle 1.5 --budget 240 --out $OUT/g2 > $OUT/g2/grid.log 2>&1; echo "rc=$?" >> $OUT/g2/grid.log
kill $SMI
cp scripts/_call.sh $OUT/call.sh
tail -22 $OUT/g1/grid.log > $OUT/tail.txt; tail -22 $OUT/g2/grid.log >> $OUT/tail.txt
(cd $OUT && tar czf grids.tgz g1 g2 && rm -rf g1 g2)
cat $OUT/tail.txt

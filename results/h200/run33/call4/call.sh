#!/usr/bin/env bash
set -u
mkdir -p $OUT/c
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD:$PWD/scripts PYTHONUNBUFFERED=1 MPLBACKEND=Agg
cp scripts/_call.sh $OUT/c/call.sh
(date -u; nvidia-smi; python3 -c "import torch,triton;print(torch.__version__,triton.__version__,torch.version.cuda)"; git log --oneline -1; git status --short) > $OUT/c/gpu.txt 2>&1
nb() { t1=$SECONDS; timeout 150 python3 -c "
from fp8lab import notebooks; notebooks.run_script('$1')" > $OUT/c/nb_$1.log 2>&1; echo "rc=$? $((SECONDS-t1))s" >> $OUT/c/nb_$1.log; }
( t0=$SECONDS; timeout 150 python3 -m pytest -q -p no:cacheprovider -rs tests/test_kernels_attention.py::test_explain_helpers tests/test_kernels_attention_ws.py::test_v24_records tests/test_kernels_attention_ws.py::test_v12_records_and_register_counts tests/test_explain.py tests/test_plots_perf.py tests/test_metrics.py > $OUT/c/tests.log 2>&1; echo "rc=$? $((SECONDS-t0))s" >> $OUT/c/tests.log ) &
( nb 09_gluon_fa3_kernel; nb 08_triton_fp8_attention ) &
wait
date -u >> $OUT/c/gpu.txt
for f in $OUT/c/*.log; do echo "== $(basename $f)"; tail -3 $f | cut -c1-300; done
cd $OUT && tar czf c.tgz c && rm -rf c

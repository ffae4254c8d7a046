#!/usr/bin/env bash
set -u
mkdir -p $OUT/c
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl > /dev/null 2>&1
xz -dc .gpu/_vllm_fa3_C.abi3.so.xz > /tmp/_vllm_fa3_C.abi3.so
export FP8LAB_VLLM_FA3_LIB=/tmp/_vllm_fa3_C.abi3.so
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
cp scripts/_call.sh $OUT/c/call.sh
(nvidia-smi; python3 -c "import torch,triton;print(torch.__version__,triton.__version__)"; git log --oneline -1) > $OUT/c/gpu.txt 2>&1
run() {  # name, pytest args...
  local name=$1; shift
  ( t0=$SECONDS; timeout 550 python3 -m pytest -q -p no:cacheprovider -rs "$@" > $OUT/c/$name.log 2>&1; echo "rc=$? $((SECONDS-t0))s" >> $OUT/c/$name.log ) &
}
WS=tests/test_kernels_attention_ws.py
run ws_a $WS -k "key_ordered or persistent or dynamic"
run ws_b $WS -k "not (key_ordered or persistent or dynamic)"
run backends tests/test_gpu_backends.py
run rest tests --ignore=$WS --ignore=tests/test_gpu_backends.py --ignore=tests/test_notebooks_run.py
wait
for f in $OUT/c/*.log; do echo "== $(basename $f)"; tail -4 $f; done
cd $OUT && tar czf c.tgz c && rm -rf c

#!/usr/bin/env bash
set -u
mkdir -p $OUT/c
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl > /dev/null 2>&1
xz -dc .gpu/_vllm_fa3_C.abi3.so.xz > /tmp/_vllm_fa3_C.abi3.so
export FP8LAB_VLLM_FA3_LIB=/tmp/_vllm_fa3_C.abi3.so
export PYTHONPATH=/tmp/site:$PWD:$PWD/scripts PYTHONUNBUFFERED=1 MPLBACKEND=Agg
cp scripts/_call.sh $OUT/c/call.sh
(date -u; nvidia-smi; python3 -c "import torch,triton;print(torch.__version__,triton.__version__,torch.version.cuda)"; git log --oneline -1; git status --short; sha256sum /tmp/_vllm_fa3_C.abi3.so .gpu/*.whl) > $OUT/c/gpu.txt 2>&1
T=420
t0=$SECONDS; timeout 150 python3 scripts/probe_quant_buffers.py $OUT/c/bench_v37_quant_buffers.json > $OUT/c/probe_buffers.log 2>&1; echo "rc=$? $((SECONDS-t0))s" >> $OUT/c/probe_buffers.log
S0=$SECONDS
run() {  # name, pytest args...
  local name=$1; shift
  t0=$SECONDS; timeout $((T - (SECONDS - S0))) python3 -m pytest -q -p no:cacheprovider -rs --durations=8 "$@" > $OUT/c/$name.log 2>&1; echo "rc=$? $((SECONDS-t0))s" >> $OUT/c/$name.log
}
nb() { t1=$SECONDS; timeout $((T - (SECONDS - S0))) python3 -c "
from fp8lab import notebooks; notebooks.run_script('$1')" > $OUT/c/nb_$1.log 2>&1; echo "rc=$? $((SECONDS-t1))s" >> $OUT/c/nb_$1.log; }
ign=""; for f in tests/test_kernels_attention.py tests/test_kernels_quantize.py tests/test_kernels_quantize_delayed.py tests/test_kernels_vlayout.py tests/test_kernels_attention_ws.py tests/test_gpu_backends.py tests/test_notebooks_run.py; do ign="$ign --ignore=$f"; done
( run rest tests $ign ) &
( nb 06_fp8_kv_cache ) &
( nb 05_fp8_attention_accuracy; nb 04_fa2_fa3_version_gating ) &
( nb 03_per_head_scales_and_strides; nb 07_performance; nb 01_fp8_numerics; nb 00_quickstart ) &
( nb 02_scale_strategies; nb 08_triton_fp8_attention; nb 09_gluon_fa3_kernel ) &
wait
date -u >> $OUT/c/gpu.txt
cat $OUT/c/probe_buffers.log | cut -c1-150
for f in $OUT/c/*.log; do echo "== $(basename $f)"; tail -3 $f | cut -c1-300; done
cd $OUT && tar czf c.tgz c && rm -rf c

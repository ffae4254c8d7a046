#!/usr/bin/env bash
set -u
mkdir -p $OUT/c
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl > /dev/null 2>&1
xz -dc .gpu/_vllm_fa3_C.abi3.so.xz > /tmp/_vllm_fa3_C.abi3.so
export FP8LAB_VLLM_FA3_LIB=/tmp/_vllm_fa3_C.abi3.so
export PYTHONPATH=/tmp/site:$PWD:$PWD/scripts PYTHONUNBUFFERED=1 MPLBACKEND=Agg
cp scripts/_call.sh $OUT/c/call.sh
(date -u; nvidia-smi; python3 -c "import torch,triton;print(torch.__version__,triton.__version__)"; git log --oneline -1; git status --short; sha256sum /tmp/_vllm_fa3_C.abi3.so .gpu/*.whl) > $OUT/c/gpu.txt 2>&1
T=555
run() {  # name, pytest args...
  local name=$1; shift
  ( t0=$SECONDS; timeout $T python3 -m pytest -q -p no:cacheprovider -rs "$@" > $OUT/c/$name.log 2>&1; echo "rc=$? $((SECONDS-t0))s" >> $OUT/c/$name.log ) &
}
WS=tests/test_kernels_attention_ws.py
K="tests/test_kernels_attention.py tests/test_kernels_quantize.py tests/test_kernels_quantize_delayed.py tests/test_kernels_vlayout.py"
run ws_a $WS -k "key_ordered or persistent or dynamic"
run ws_b $WS -k "not (key_ordered or persistent or dynamic)"
run backends tests/test_gpu_backends.py
run kernels $K
ign=""; for f in $WS tests/test_gpu_backends.py tests/test_notebooks_run.py $K; do ign="$ign --ignore=$f"; done
run rest tests $ign
nb() { t1=$SECONDS; timeout $((T - (SECONDS - t0))) python3 -c "
from fp8lab import notebooks; notebooks.run_script('$1')" > $OUT/c/nb_$1.log 2>&1; echo "rc=$? $((SECONDS-t1))s" >> $OUT/c/nb_$1.log; }
( t0=$SECONDS; timeout 200 python3 scripts/gpu_decode_fidelity.py --validate --out $OUT/c/decode_validate.json --vllm-lib /tmp/_vllm_fa3_C.abi3.so > $OUT/c/decode.log 2>&1; echo "rc=$? $((SECONDS-t0))s" >> $OUT/c/decode.log
  nb 06_fp8_kv_cache ) &
( t0=$SECONDS; for n in 00_quickstart 01_fp8_numerics 02_scale_strategies 03_per_head_scales_and_strides 04_fa2_fa3_version_gating 05_fp8_attention_accuracy 07_performance 08_triton_fp8_attention; do nb $n; done ) &
wait
for f in $OUT/c/*.log; do echo "== $(basename $f)"; tail -3 $f; done
cd $OUT && tar czf c.tgz c && rm -rf c

#!/bin/bash
# gpu_session.sh's steps on the committed code, the quantization file left out (run14/call3 ran it on this kernel)
set -u
mkdir -p $OUT
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
xz -dc .gpu/_vllm_fa3_C.abi3.so.xz > /tmp/_vllm_fa3_C.abi3.so && export FP8LAB_VLLM_FA3_LIB=/tmp/_vllm_fa3_C.abi3.so
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
{ python3 -c "import torch, triton, sys; print(torch.__version__, triton.__version__, torch.version.cuda, sys.version)"; } > $OUT/gpu.txt 2>&1
python3 -m fp8lab.cli doctor > "$OUT/doctor.txt" 2>&1
step() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "$name: rc=$? in $((SECONDS - t0)) s (limit $limit)" | tee -a "$OUT/steps.txt"
  tail -n 3 "$OUT/$name.log"
}
step gpu_unit 190 python3 -m pytest -q -m "gpu or hopper" tests --ignore=tests/test_gpu_backends.py \
  --ignore=tests/test_notebooks.py --ignore=tests/test_kernels_attention.py --ignore=tests/test_kernels_quantize.py \
  -p no:cacheprovider
step kernels_attention 140 python3 -m pytest -q tests/test_kernels_attention.py -p no:cacheprovider
step gpu_backends 100 python3 scripts/gpu_backends.py --out "$OUT" --budget 85 -k "fp8 or descale or q_scale"
step notebooks 130 python3 -c "
import time
from fp8lab import notebooks
for s in notebooks.MANIFEST:
    t = time.time()
    try:
        notebooks.run_script(s.name, smoke=True); print('ok    ', s.name, round(time.time() - t, 1), 's', flush=True)
    except Exception as e:
        print('FAILED', s.name, str(e)[:300], flush=True)
"
cat $OUT/notebooks.log | tail -12

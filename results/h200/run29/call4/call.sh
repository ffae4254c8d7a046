#!/usr/bin/env bash
set -u
mkdir -p $OUT/c
export PYTHONPATH=$PWD:$PWD/scripts PYTHONUNBUFFERED=1 MPLBACKEND=Agg
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/seaborn*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PYTHONPATH
cp scripts/_call.sh $OUT/c/call.sh
(date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; python3 -c "import torch,triton;print(torch.__version__,triton.__version__)"; git log --oneline -1; git status --short) > $OUT/c/gpu.txt 2>&1
( t0=$SECONDS; timeout 400 python3 -m pytest -q -p no:cacheprovider -rs tests/test_kernels_attention.py -k 'explain or sinks or permute or key_order' > $OUT/c/attn.log 2>&1; echo "rc=$? $((SECONDS-t0))s" >> $OUT/c/attn.log ) &
( t0=$SECONDS; timeout 400 python3 -c "
import json
from fp8lab import notebooks
notebooks.run_script('08_triton_fp8_attention')
" > $OUT/c/nb08.log 2>&1; echo "rc=$? $((SECONDS-t0))s" >> $OUT/c/nb08.log
  true ) &
wait
for f in $OUT/c/*.log; do echo "== $(basename $f)"; tail -12 $f; done

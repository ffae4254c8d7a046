#!/bin/bash
# run18 call 3 (run twice: the first run returned 8 of its files): Nsight Compute profiles of the on-chip per-head quantization kernel (scripts/profile_quant.py)
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" > $OUT/gpu.txt 2>&1
nvidia-smi --query-gpu=driver_version,name --format=csv >> $OUT/gpu.txt 2>&1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU" >> $OUT/gpu.txt; $NCU --version >> $OUT/gpu.txt 2>&1
for s in token-1x16384 token-4x4096 head-1x16384 token-2x8192; do
  timeout 150 $NCU --clock-control none --kernel-name regex:_onchip --launch-skip 2 --launch-count 1 --set full \
    --import-source no -f -o $OUT/prof_$s python3 scripts/profile_quant.py $s > $OUT/prof_$s.log 2>&1; echo "rc=$?" >> $OUT/prof_$s.log
  $NCU --import $OUT/prof_$s.ncu-rep --page raw --csv > $OUT/raw_$s.csv 2>> $OUT/prof_$s.log
  $NCU --import $OUT/prof_$s.ncu-rep --page details > $OUT/details_$s.txt 2>> $OUT/prof_$s.log
  tail -3 $OUT/prof_$s.log
done
$NCU --import $OUT/prof_token-1x16384.ncu-rep --page source --csv --print-source sass > $OUT/source_token-1x16384.csv 2> $OUT/source.err
$NCU --import $OUT/prof_token-4x4096.ncu-rep --page source --csv --print-source sass > $OUT/source_token-4x4096.csv 2>> $OUT/source.err
ls -la $OUT; head -c 600 $OUT/source.err
grep -E "Duration|DRAM Throughput|Memory Throughput|L2 Hit|Warp Cycles Per Issued|Achieved Occupancy" $OUT/details_*.txt | head -60
cd $OUT && tar czf profiles.tgz *.ncu-rep *.csv *.txt *.log source.err && find . -type f ! -name profiles.tgz ! -name gpu.txt -delete && ls -la

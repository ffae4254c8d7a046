#!/bin/bash
# run18 call 6: which DRAM row counters Nsight Compute has on the H200, and those counters on 1 and 4 sequences and head-major x
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
$NCU --query-metrics --chip gh100 > $OUT/metrics_gh100.txt 2>&1 || $NCU --query-metrics > $OUT/metrics_gh100.txt 2>&1
grep -i -E "^(dram|fbpa|fbsp|dramc)__" $OUT/metrics_gh100.txt > $OUT/dram_metrics.txt
wc -l $OUT/metrics_gh100.txt $OUT/dram_metrics.txt; cat $OUT/dram_metrics.txt | cut -c1-150 | head -80
for s in token-1x16384 token-4x4096 head-1x16384; do
  timeout 100 $NCU --clock-control none --kernel-name regex:_onchip --launch-skip 2 --launch-count 1 \
    --metrics "regex:^(dram|fbpa|dramc)__.*,gpu__time_duration.sum" --csv --page raw \
    python3 scripts/profile_quant.py $s > $OUT/rows_$s.csv 2> $OUT/rows_$s.err; echo "$s rc=$?"
  tail -2 $OUT/rows_$s.err
done
cd $OUT && tar czf call6.tgz *.txt *.csv *.err && find . -type f ! -name call6.tgz -delete; ls -la

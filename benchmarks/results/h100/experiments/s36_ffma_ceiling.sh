#!/usr/bin/env bash
# Session 36: the issue ceiling of a CUDA C FFMA loop with kernel 21's 16x8 thread tile and 2 warps
# per scheduler (tools/ffma_ceiling_probe.cu): timed at the GPU's own clock, then ncu (stall reasons
# per issued instruction, ncu's locked clock) of each variant and of cuBLAS SGEMM at 4096^3.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvcc -std=c++17 -O3 -arch=sm_90a -Xptxas -v -o /tmp/ffma_ceiling tools/ffma_ceiling_probe.cu > $OUT/s36_ffma_ceiling_build.txt 2>&1 || { cat $OUT/s36_ffma_ceiling_build.txt; exit 1; }
grep -E 'registers|spill' $OUT/s36_ffma_ceiling_build.txt
/tmp/ffma_ceiling 10000 | tee $OUT/s36_ffma_ceiling.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv | tee -a $OUT/s36_ffma_ceiling.txt
M=smsp__issue_active.avg.per_cycle_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,smsp__warps_active.avg.per_cycle_active
for s in barrier dispatch_stall long_scoreboard math_pipe_throttle mio_throttle no_instruction not_selected selected short_scoreboard wait branch_resolving; do
  M=$M,smsp__average_warps_issue_stalled_${s}_per_issue_active.ratio
done
timeout 200 ncu --metrics $M -k regex:ffma_ceiling --launch-skip 6 --launch-count 3 /tmp/ffma_ceiling 500 > $OUT/s36_ffma_ceiling_ncu.txt 2>&1
echo "ncu probe rc=$?"
cat > /tmp/sgemm.py <<'PY'
import torch
torch.backends.cuda.matmul.allow_tf32 = False
a = torch.randn(4096, 4096, device="cuda"); b = torch.randn(4096, 4096, device="cuda")
for _ in range(3): c = a @ b
torch.cuda.synchronize()
PY
timeout 200 ncu --metrics $M -k regex:gemm --launch-skip 2 --launch-count 1 python3 /tmp/sgemm.py > $OUT/s36_sgemm_ncu.txt 2>&1
echo "ncu sgemm rc=$?"
grep -vE '^==PROF==|^\s*$' $OUT/s36_ffma_ceiling_ncu.txt $OUT/s36_sgemm_ncu.txt | grep -E 'ffma_ceiling_kernel|gemm|issue_active|fma_cycles|warps_active|stalled' | sed 's/smsp__average_warps_issue_stalled_//' | head -80

#!/bin/sh
# The fifty-second session's owed A/Bs, for the device (README's GPU recipe; writes under $OUT).
# 1. tma.KEEP_MAPS: each work-group keeps its tensor maps between launches and skips their
#    write and GPU-wide release fence while the operand stays (built, off until timed). The
#    small TMA products (f16 batched 32x512x512x64, 0.89x net) are where the prologue shows.
# 2. The fifty-first session's owed attention A/Bs: LEAD off at 128 features (ptxas: 255
#    registers with spills with the lead, 212 without), HEAVY_FIRST on causal masks.
# 3. One TF32 product by TMA (wgmma_ss's form, mma-tf32 off) at the f32 "between" shape: the
#    floor of a 3xTF32 kernel that reads split operands from local memory (papers/kernels.md,
#    fifty-second session).
K="keep=accy.kernels.tma.KEEP_MAPS=True"
NL="nolead=accy.kernels.attention_tma.LEAD=False"
H="heavy=accy.kernels.attention_mma_plan.HEAVY_FIRST=True"
python3 experiments/ab_gemm.py --device nvidia --variant "$K" --rounds 3 --repeat 15 --no-torch \
  --cases f16:32x512x512x64,f16:4096x4096x64,f16:1000x1030x520,f16:16x1024x1024x128,f16:2048x2048x256,f16:256x256x65536,f16:4096x1024x4096,f16:4096x4096x4096 \
  --out $OUT/keep_fit.json
python3 experiments/ab_gemm.py --device nvidia --variant "$K" --rounds 3 --repeat 15 --no-torch \
  --seed 52 --count 16 --max-macs 2e10 --max-batch 16 --dtypes f16 --out $OUT/keep_held.json
ba() { python3 experiments/bench_attention.py --device nvidia --dtype f16 --variants fused --repeat 15 "$@"; }
ba --variant "$K" --no-torch --batch 2 --heads 8 --seqs 1000,2048 --head-dim 64 --out $OUT/keep_attn.json
ba --variant "$NL" --batch 4 --heads 16 --seqs 2048,4096 --head-dim 128 --out $OUT/lead128.json
ba --variant "$NL" --variant "$H" --batch 2 --heads 16 --seqs 4096 --head-dim 128 --causal --out $OUT/lead128_causal.json
ba --variant "$NL" --no-torch --batch 2 --heads 8 --seqs 3000 --head-dim 128 --out $OUT/lead128_held.json
ba --variant "$H" --batch 8 --heads 16 --seqs 2048 --head-dim 64 --causal --out $OUT/heavy64.json
ba --variant "$H" --no-torch --batch 4 --heads 12 --seqs 777 --head-dim 64 --causal --out $OUT/heavy_held.json
python3 experiments/bench_mma.py --device nvidia --cases 1000x1030x520t,1000x1030x520,2048x1024x512t \
  --policies tf32,3xtf32 --disable mma-tf32 --repeat 15 --out $OUT/tf32_ss.json

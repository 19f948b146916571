#!/bin/sh
# The fifty-first session's owed A/Bs, for the device (README's GPU recipe; writes under $OUT).
# 1. tma-attention-f16 at 128 features runs 128-key tiles one tile ahead: ptxas (CUDA 13,
#    offline: experiments/kernel_asm.py) gives that kernel 255 registers and spills, and 212
#    without the lead (250 with a causal mask, no spills). Adopt LEAD off there if it wins.
# 2. The fiftieth session's HEAVY_FIRST (causal query blocks heaviest first), still untimed.
# (The fiftieth's LEAD question at 64 features is answered: without the lead 0.452 against
#  0.369 ms plain, 0.349 against 0.296 causal, 8x16x2048x64 on the H100.)
NL="nolead=accy.kernels.attention_tma.LEAD=False"
H="heavy=accy.kernels.attention_mma_plan.HEAVY_FIRST=True"
ba() { python3 experiments/bench_attention.py --device nvidia --dtype f16 --variants fused --repeat 15 "$@"; }
ba --variant "$NL" --batch 4 --heads 16 --seqs 2048,4096 --head-dim 128 --out $OUT/lead128.json
ba --variant "$NL" --variant "$H" --batch 2 --heads 16 --seqs 4096 --head-dim 128 --causal --out $OUT/lead128_causal.json
ba --variant "$NL" --no-torch --batch 2 --heads 8 --seqs 3000 --head-dim 128 --out $OUT/lead128_held.json
ba --variant "$H" --batch 8 --heads 16 --seqs 2048 --head-dim 64 --causal --out $OUT/heavy64.json
ba --variant "$H" --no-torch --batch 4 --heads 12 --seqs 777 --head-dim 64 --causal --out $OUT/heavy_held.json

#!/bin/sh
# The fiftieth session's owed A/B, for the device: tma-attention-f16 without the next tile's
# scores in flight (LEAD), which at 64 features leaves registers for the causal mask's second
# loop (SPLIT; ptxas: 127 registers, against 152 with the lead); and causal query blocks
# heaviest first (attention_mma_plan.HEAVY_FIRST). Run from the repository root
# with accy's wheels installed (README's GPU recipe); writes under $OUT.
A="nolead=accy.kernels.attention_tma.LEAD=False;accy.kernels.attention_tma.KEYS=(64,)"
B="nolead_split=accy.kernels.attention_tma.LEAD=False;accy.kernels.attention_tma.KEYS=(64,);accy.kernels.attention_tma.SPLIT=True"
H="heavy=accy.kernels.attention_mma_plan.HEAVY_FIRST=True"
ba() { python3 experiments/bench_attention.py --device nvidia --dtype f16 --variants fused --variant "$A" --variant "$B" --repeat 15 --no-torch "$@"; }
ba --batch 8 --heads 16 --seqs 2048 --head-dim 64 --causal --variant "$H" --out $OUT/lead_causal64.json
ba --batch 2 --heads 16 --seqs 4096 --head-dim 128 --causal --variant "$H" --out $OUT/heavy_causal128.json
ba --batch 8 --heads 16 --seqs 2048,4096 --head-dim 64 --out $OUT/lead_plain64.json
ba --batch 2 --heads 8 --seqs 3000 --head-dim 64 --out $OUT/lead_held64.json
ba --batch 4 --heads 12 --seqs 777 --head-dim 64 --causal --out $OUT/lead_held_causal64.json

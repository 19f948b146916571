#!/bin/sh
# The fifty-fourth session's owed A/B, for the device: tma-attention-f16 in work-groups of one
# warpgroup (4 warps, 64 queries) instead of two. Larger work-groups (12, 16 warps) timed
# slower than two independent ones a multiprocessor (papers/kernels.md, "Fifty-fourth
# session"); one warpgroup a work-group makes four independent ones (64-key tiles: 3 stages of
# 16 KiB each, registers for four) at twice the copies from L2. Run from the repository root
# with accy's wheels installed (README's GPU recipe); writes under $OUT.
P=accy.kernels.attention_mma_plan.WG_FORMS; K=accy.kernels.attention_tma.KEYS
A="wg4=$P=((4,1),)"
B="wg4k64=$P=((4,1),);$K=(64,)"
ba() { python3 experiments/bench_attention.py --device nvidia --dtype f16 --variants fused --variant "$A" --variant "$B" --repeat 15 "$@"; }
ba --batch 8 --heads 16 --seqs 1024,2048,4096 --head-dim 64 --out $OUT/wg4_plain64.json
ba --batch 8 --heads 16 --seqs 2048 --head-dim 64 --causal --no-torch --out $OUT/wg4_causal64.json
ba --batch 2 --heads 12 --seqs 3000 --head-dim 64 --no-torch --out $OUT/wg4_held64.json
ba --batch 4 --heads 16 --seqs 2048 --head-dim 128 --no-torch --out $OUT/wg4_plain128.json

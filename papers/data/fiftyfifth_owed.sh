#!/bin/sh
# The fifty-fifth session's owed A/B, for the device (papers/kernels.md, "Fifty-fifth
# session"): tma-attention-f16 with the next tile's scores held ahead of the softmax
# (attention_wgmma.PIN: ptxas otherwise issues them beside P V, so the lead never overlaps)
# and the queries in local memory (attention_tma.QLOCAL: S by wgmma SS), alone and together
# (ptxas offline at 8x16x2048x64: 124 registers as chosen, PIN 150, QLOCAL 128, both 128).
# Run from the repository root with accy's wheels installed (README's GPU recipe); writes
# under $OUT. Needs about 5 minutes of device time. Each knob set runs in a process of its
# own, a small sanity run first: a kernel that fails to launch spoils its process's context
# (the fifty-sixth session's order).
W=accy.kernels.attention_wgmma.PIN; Q=accy.kernels.attention_tma.QLOCAL
PQ="pinq=$W=True;$Q=True"
ba() { python3 experiments/bench_attention.py --device nvidia --dtype f16 --variants fused --repeat 10 "$@"; }
ba --variant "$PQ" --variant "q=$Q=True" --batch 2 --heads 4 --seqs 1024 --head-dim 64 --no-torch --out $OUT/sanity.json
ba --variant "pin=$W=True" --batch 8 --heads 16 --seqs 1024,2048,4096 --head-dim 64 --out $OUT/plain64_pin.json
ba --variant "$PQ" --batch 8 --heads 16 --seqs 1024,2048,4096 --head-dim 64 --no-torch --out $OUT/plain64_pinq.json
ba --variant "q=$Q=True" --batch 8 --heads 16 --seqs 1024,2048,4096 --head-dim 64 --no-torch --out $OUT/plain64_q.json
ba --variant "$PQ" --batch 2 --heads 12 --seqs 3000 --head-dim 64 --no-torch --out $OUT/held64.json
ba --variant "pin=$W=True" --variant "$PQ" --batch 8 --heads 16 --seqs 2048 --head-dim 64 --causal --no-torch --out $OUT/causal64.json
ba --variant "q=$Q=True" --variant "$PQ" --batch 4 --heads 16 --seqs 2048 --head-dim 128 --no-torch --out $OUT/plain128.json
python3 experiments/bench_gpu.py --device nvidia --programs attention_2048_f16 --set "$W=True;$Q=True" --out $OUT/gpu_pinq.json
python3 experiments/bench_gpu.py --device nvidia --programs attention_2048_f16 --out $OUT/gpu_base.json

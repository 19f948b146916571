#!/bin/sh
# The device runs owed by the forty-seventh session (papers/kernels.md, "Forty-seventh
# session"), for ACCY_DEVICE=nvidia with the wheels as the README says; ab_gemm keeps its record
# after every product, so a run cut short keeps what it timed.
set -u
OUT=${OUT:-results}
F="Warning\|lambda\|_warn_once\|for p_index\|warning generated"
# 1. held out for SPLIT_WIDE_KMAJOR (now False): 16 products whose plan it changes, drawn
#    offline (ab_gemm --plans-only papers/data/h100_profile.json --count 400 --seed 90
#    --dtypes f16, --layout nt and nn); "wide" is the old plan
python3 experiments/ab_gemm.py --device nvidia --no-torch --cases $(cat papers/data/fortyseventh_rule_held.txt) \
  --variant wide=accy.kernels.wgmma_ss.SPLIT_WIDE_KMAJOR=True --out $OUT/rule_held.json 2>&1 | grep -v "$F"
# 2. the default set against torch.compile (last measured in the forty-fifth session)
python3 experiments/bench_gpu.py --device nvidia --out $OUT/bench_gpu.json 2>&1 | grep -v "$F"

#!/bin/sh
# The A/Bs owed by the forty-sixth session (papers/kernels.md, "Forty-sixth session"), in
# order of priority, for the device (ACCY_DEVICE=nvidia; wheels as the README says). Each
# ab_gemm rewrites its record after every product, so a run cut short keeps what it timed.
# Cases planned offline with ab_gemm --plans-only papers/data/h100_profile.json (seeds 60-64
# for LONE_STAGES, 54 --layout nt for the forms, 70 for the f32 rates).
set -u
OUT=${OUT:-results}
# 1. LONE_STAGES and OVERLAP on f16 products whose 128x128 tiles sit alone on their units
python3 experiments/ab_gemm.py --device nvidia --cases f16:608x2464x1968,f16:997x1576x1464,f16:1405x1168x2608,f16:608x2464x1968:nt,f16:997x1576x1464:nt,f16:1405x1168x2608:nt,f16:553x2346x840,f16:925x1972x2372,f16:323x3208x952,f16:2894x360x720,f16:1400x1438x3418,f16:712x2334x800,f16:3094x136x784,f16:695x2790x2924,f16:1148x1018x702,f16:1226x894x1758,f16:795x2076x3144,f16:2145x758x2744,f16:1000x1030x520,f16:1024x1024x1024,f16:768x1536x1024 \
  --variant lone6=accy.kernels.wgmma_ss.LONE_STAGES=6 --variant ov=accy.kernels.wgmma_ss.OVERLAP=True \
  --variant "ov6=accy.kernels.wgmma_ss.OVERLAP=True;accy.kernels.wgmma_ss.LONE_STAGES=6" --out $OUT/lone.json 2>&1 | grep -v "Warning\|lambda\|_warn_once\|for p_index\|warning generated"
# 2. OVERLAP on products of many tiles (walked, 128x256, batched, small K)
python3 experiments/ab_gemm.py --device nvidia --cases f16:4096x4096x4096,f16:4096x4096x1024,f16:8192x8192x1024,f16:4096x4096x64,f16:32x512x512x64,f16:4096x4096x1024:nt,f16:2048x2048x2048,f16:3000x5000x2000 \
  --variant ov=accy.kernels.wgmma_ss.OVERLAP=True --out $OUT/big.json 2>&1 | grep -v "Warning\|lambda\|_warn_once\|for p_index\|warning generated"
# 3. held out for whichever of 1 wins (seeds 62-64)
python3 experiments/ab_gemm.py --device nvidia --cases f16:3133x576x4784,f16:1313x882x2914,f16:621x1902x1608,f16:1535x1286x2768,f16:1152x1622x852,f16:904x2034x1402,f16:746x2560x726,f16:938x1194x1022,f16:757x1868x3474,f16:3121x376x2416,f16:413x2678x1736,f16:1635x778x890,f16:691x2776x3912:nt,f16:2218x874x1856:nt \
  --variant lone6=accy.kernels.wgmma_ss.LONE_STAGES=6 --variant ov=accy.kernels.wgmma_ss.OVERLAP=True --out $OUT/lone_held.json 2>&1 | grep -v "Warning\|lambda\|_warn_once\|for p_index\|warning generated"
# 4. SPLIT_K_F16 held out (owed since the forty-fifth session; seeds 52-53)
python3 experiments/ab_gemm.py --device nvidia --cases f16:1682x822x3880,f16:2701x596x3480,f16:2418x652x1648,f16:1207x790x2688,f16:1906x898x3342,f16:768x1432x1504,f16:1380x1248x2758,f16:1531x966x1056,f16:2211x614x3308,f16:1632x1254x1724 \
  --variant old=accy.kernels.wgmma_ss.SPLIT_K_F16=1024 --out $OUT/split.json 2>&1 | grep -v "Warning\|lambda\|_warn_once\|for p_index\|warning generated"
# 5. the split kernel behind a K-major B: 128x128 tiles only against the forms (seed 54, --layout nt)
python3 experiments/ab_gemm.py --device nvidia --cases f16:1774x222x28224:nt,f16:409x3262x11196:nt,f16:3198x980x2324:nt,f16:2359x1136x552:nt,f16:2132x450x5480:nt,f16:2615x1976x1602:nt,f16:828x870x2464:nt,f16:1686x2788x1474:nt,f16:1527x1424x1324:nt,f16:223x1682x25208:nt,f16:3283x2276x1456:nt,f16:2206x198x17888:nt,f16:104x2910x15216:nt,f16:2715x1376x3650:nt,f16:285x3738x4760:nt,f16:721x3828x4618:nt,f16:746x404x20666:nt \
  --variant "only128=accy.kernels.wgmma_ss.FORMS=((2,128,3),)" --out $OUT/nt.json 2>&1 | grep -v "Warning\|lambda\|_warn_once\|for p_index\|warning generated"
# 6. f32 (3xTF32) products where 128-row wgmma tiles would be taken over the mma kernels
python3 experiments/ab_gemm.py --device nvidia --cases f32:1000x1030x520,f32:1200x900x700,f32:600x2000x800,f32:1591x978x2566,f32:708x3718x556,f32:2511x1290x484,f32:574x1629x276,f32:2472x2101x295,f32:1098x2785x1036,f32:792x2605x985,f32:1959x1440x330 \
  --variant "w=accy.kernels.wgmma.RATES={4:1.5,2:2.0}" --out $OUT/w32.json 2>&1 | grep -v "Warning\|lambda\|_warn_once\|for p_index\|warning generated"

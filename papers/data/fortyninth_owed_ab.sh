#!/bin/sh
# The forty-ninth session's owed A/B (mma.SPLIT_ONCE), for the device: run from the repository root
# with accy's wheels installed (README's GPU recipe), in order of priority; writes under $OUT.
FIT=f32:1000x1030x520,f32:761x966x313,f32:1200x700x777,f32:45x540x404x95,f32:35x315x466x81,f32:32x512x512x64,f32:4096x4096x64,f32:1000x1024x520,f32:700x1500x900,f32:900x1100x700,f32:203x66x207,f32:1352x54x8924,f32:1051x1121x110,f32:768x568x712,f32:129x3634x3758,f32:42x43x4192,f32:2336x171x1826,f32:2957x179x3335,f32:678x107x17511,f32:644x188x580,f32:43x916x5285,f32:54x401x1985,f32:51x127x809,f32:62x275x2396,f32:146x78x1710,f32:71x1954x194,f32:1430x198x458,f32:524x233x1698
HELD=f32:280x338x8951,f32:383x529x94,f32:562x537x179,f32:461x38x834,f32:23x119x80,f32:730x54x196,f32:2027x35x8450,f32:599x78x384,f32:108x35x2730,f32:242x83x471,f32:1030x54x1945,f32:1575x45x464,f32:557x1139x75,f32:155x1264x215,f32:121x160x26441,f32:45x420x7733,f32:46x835x216,f32:93x207x98,f32:179x870x4821,f32:141x1443x133,f32:85x498x1981,f32:318x2144x452
python3 experiments/ab_gemm.py --device nvidia --rounds 3 --cases $FIT --variant once=accy.kernels.mma.SPLIT_ONCE=True --out $OUT/once_fit.json
python3 experiments/ab_gemm.py --device nvidia --rounds 3 --cases $HELD --variant once=accy.kernels.mma.SPLIT_ONCE=True --out $OUT/once_held.json
# second: the mma-3xtf32 tilings and both roundings on "between" products (1000x1030x520's B
# rows copied 8 bytes at a time), against cuBLAS FP32
python3 experiments/bench_mma.py --device nvidia --cases 1000x1030x520,700x1500x900,1200x800x600,900x1100x700,1500x700x400 --policies 3xtf32 --tiles 64x32x16:2x2:3,64x32x16:2x1:3,64x32x32:2x2:3,64x64x16:2x1:3,64x64x16:2x2:3,128x64x16:2x2:3 --rounding fragment,tile --repeat 15 --out $OUT/between_tiles.json
# third: bench_gpu's whole default set (attention at 1024 and 4096 not timed since the 47th)
python3 experiments/bench_gpu.py --device nvidia --out $OUT/bench_all.json

"""Kernels: a small kernel IR (:mod:`accy.kernels.ir`) and the generators that build it from
fusion groups (:mod:`accy.kernels.loopnest` for any op; specialised generators add speed)."""

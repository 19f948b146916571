"""The egglog bridge: tensor sorts and named rules, IR conversion, saturation, extraction cost.

``sorts`` (what rule modules import), ``convert`` (IR <-> e-graph), ``driver`` (budgeted
saturation and run reports), ``cost`` (shape-aware cost models and extraction).
"""

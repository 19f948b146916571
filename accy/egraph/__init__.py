"""The egglog bridge: tensor sorts and named rules, IR conversion, saturation, extraction cost.

``sorts`` (the ``Tensor`` sort rule modules import), ``rules`` (the named-rule registry and
the Python helpers rules call), ``convert`` (IR <-> e-graph), ``driver`` (budgeted
saturation and run reports), ``cost`` (shape-aware cost models, tree extraction), ``extract``
(the extractor registry: greedy-dag, tree, ilp), ``regions`` (acceptance by region),
``defaults`` (the one set of budget and extractor defaults).
"""

"""One operator, one target: compile, execute (a simulator, this CPU or a GPU), check against numpy, report.

``run`` (run.py) drives every target through the same steps; a target contributes a ``TargetFlow``
(flow.py) in a module of its own (diannao.py, vita.py, cpu.py, cuda.py); check.py is how a result is
compared with its reference; targets.py resolves target names and files into values; catalogue.py,
compile.py and cross.py are ``tandem compile``'s operators and paths; layer_tables.py holds the layers of
the papers' tables. layers.py is what every target reads of a layer (one type per kind: a conv2d
``ConvShape``, a GEMM ``GemmShape``), cpu_layers.py and vita_layers.py a target's functions of one
(schedule, packing, reference); cpu_tuning.py and polydl.py choose the CPU's tunings.
"""

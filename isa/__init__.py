"""Instruction-set specifications shared by the compiler and the simulators.

An instruction set is data: loaded from a TOML file in ``isa/specs/`` or built in Python with the
same dataclasses, never by executing code. Each instruction declares its operands, its semantics as
a tiny parsed tensor program, its constraints (alignment, divisibility, memory spaces, layout,
capacity), its timing (latency, initiation interval, unit) and its binary encoding. A compiled
``Program`` is an ISA object with a binary encoding and a text assembly form; it is the only thing
the compiler hands to a simulator. This layer imports nothing else of Tandem's.
"""

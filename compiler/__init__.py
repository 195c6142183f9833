"""Tandem's compiler: tensor expressions -> loop IR -> schedules -> passes -> backends.

Imports ``isa`` only (DESIGN.md layer rule).
"""

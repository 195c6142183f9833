"""Analyses of loop nests that inform the schedules: PolyDL's working sets (``working_set``)."""

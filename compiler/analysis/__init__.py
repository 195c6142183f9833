"""Analyses of loop nests that inform the schedules: PolyDL's working sets (``working_set``) and ranking
(``poly_rank``); the tensor instructions a nest issues (``issued``)."""

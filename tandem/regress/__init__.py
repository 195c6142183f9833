"""Compiler regression testing: a suite of operators x targets compared with a recorded baseline
(suite.py), and the pytest plugin (plugin.py) with its fixtures."""

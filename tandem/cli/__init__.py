"""The ``tandem`` command line: the app and its top-level commands (app.py), one module per command group
(run, model, sweep, regress, isa, sim), the demo, and the console and path helpers they share."""

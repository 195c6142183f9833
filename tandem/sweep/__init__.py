"""Design-space sweeps: the sweep file (file.py), running its points (run.py), the results store
(results.py) and the HTML report (report.py)."""

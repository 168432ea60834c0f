"""The capacity search (`python -m experiments.capacity`, `schedbench-capacity`): per
scheduler and config, the highest arrival rate at which SLO attainment stays at the target
(main.py), by bracketing and bisection (search.py) over probes run in this process over
realisations (probes.py). `workload.load` then reads the file (experiments/run/load.py)."""

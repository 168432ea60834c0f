"""Running a job: the Hydra entry point (`python -m experiments.run`), the structured
configs, building the scheduler and executor, the multirun callbacks, W&B logging.
"""

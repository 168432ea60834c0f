"""What a job reads: workloads (generators and trace replays, as lazy request streams),
trace readers, and the checks of inputs against a scheduler's limits.
"""

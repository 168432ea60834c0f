"""An example scheduler, written for DESIGN.md "Adding a scheduler": first come, first served,
each request's whole output reserved at admission, never an eviction. Not an upstream design
and not in the default comparison: run it with `scheduler=fcfs_reserve`."""

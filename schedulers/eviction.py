"""What every scheduler config shares about eviction: how a victim's KV is kept, whom to
evict, the seed of random choices, and one way to report a bad config value.

`EvictionOptions` is a base of each scheduler's config dataclass (its fields are keyword-only,
so they follow the scheduler's own), declared once here and not in the schedulers' YAML files
(the schema supplies the defaults; docs/CONFIG.md lists them under each scheduler).
"""

from __future__ import annotations

from dataclasses import dataclass

from schedulers.config_range import INT64_MAX, MAX_KV_SLOTS, MEMORY_WHY, ranged
from schedulers.host_pool import check_preemption_config
from schedulers.victim_policy import check_victim_policy


def config_error(owner: str, name: str, value: object, why: str) -> ValueError:
    """The error for a bad config value: `<owner>: <name>=<value!r>: <why>`."""
    return ValueError(f"{owner}: {name}={value!r}: {why}")


@dataclass(frozen=True, slots=True, kw_only=True)
class EvictionOptions:
    """The eviction options of every scheduler (docs/CONFIG.md takes each field's meaning
    from its comment, or from its sentence here).

    `victim_policy` picks whom to evict, one ranking for every scheduler
    (schedulers/victim_policy.py):
    default (the scheduler's upstream rule, vLLM the back of running or the least important
    under policy=priority, SGLang its retraction_policy), latest_arrival, fewest_outputs,
    least_progress, most_kv, shortest_remaining, random (seeded by random_seed), and in SGLang
    any but default needs retraction_policy=length.
    """

    preemption_mode: str = "recompute"  # recompute (upstream) or swap (KV to a host pool)
    host_kv_capacity_tokens: int = ranged(  # swap: host slots, a page-size multiple (0: recompute)
        0, low=0, high=MAX_KV_SLOTS, why=MEMORY_WHY)
    victim_policy: str = "default"
    # a run's config leaves it null: the run's seed of its realisation (experiments/run/main.py)
    random_seed: int = ranged(  # seeds victim_policy=random, SGLang's schedule_policy=random
        0, low=0, high=INT64_MAX)

    def check_eviction_options(self, owner: str, page_size: int) -> None:
        """Raise ValueError naming `owner`, the field, its value and what is valid."""
        seed = self.random_seed
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise config_error(owner, "random_seed", seed, "must be an integer")
        if seed < 0:
            raise config_error(owner, "random_seed", seed, "must be at least 0")
        check_preemption_config(owner, self.preemption_mode, self.host_kv_capacity_tokens,
                                page_size)
        check_victim_policy(owner, self.victim_policy)

"""Which running request to evict when KV memory runs out: one ranking for both schedulers.

Upstream each scheduler hard-wires its rule (vLLM preempts the back of `running`, SGLang
retracts the request with the fewest outputs). `victim_policy` swaps the rule and keeps each
scheduler's mechanics around the choice. `default` is the scheduler's own upstream rule and is
never ranked here; every other name ranks candidates the same way in both schedulers:

    latest_arrival      latest arrival first           vLLM v1's rule under policy=fcfs
    fewest_outputs      fewest outputs, longest input  SGLang's retraction_policy=length
    least_progress      fewest computed tokens         least work thrown away by recompute
    most_kv             most KV slots held             most memory freed per eviction
    shortest_remaining  smallest max_tokens - outputs  least decode left to redo on resume
    random              a seeded shuffle               the baseline any rule should beat

Ties go to the later arrival, then the larger request id, so a ranking never depends on the
order of the running list. In vLLM, `most_kv` ranks only the later arrivals than the request
that needs a block (itself when none runs): an anti-thrash rule, see
`VllmScheduler._choose_victim`. Only what a scheduler may see is ranked: `max_tokens`, never the
hidden EOS length.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

VICTIM_POLICIES = ("default", "latest_arrival", "fewest_outputs", "least_progress", "most_kv",
                   "shortest_remaining", "random")


@dataclass(frozen=True, slots=True)
class VictimFacts:
    """What a policy may know about one eviction candidate, in the scheduler's own terms.

    `computed_tokens`: positions whose KV the request holds now (vLLM num_computed_tokens,
    SGLang kv_committed_len); `kv_slots`: slots of the pages it holds; `remaining_tokens`:
    `max_tokens` minus outputs so far.
    """

    request_id: str
    arrival_time: float
    num_output_tokens: int
    num_prompt_tokens: int
    computed_tokens: int
    kv_slots: int
    remaining_tokens: int


def _tie(f: VictimFacts) -> tuple[float, str]:
    return (f.arrival_time, f.request_id)


# A larger key is evicted first.
_KEYS: dict[str, Callable[[VictimFacts], tuple[float | str, ...]]] = {
    "latest_arrival": lambda f: _tie(f),
    "fewest_outputs": lambda f: (-f.num_output_tokens, f.num_prompt_tokens, *_tie(f)),
    "least_progress": lambda f: (-f.computed_tokens, *_tie(f)),
    "most_kv": lambda f: (f.kv_slots, *_tie(f)),
    "shortest_remaining": lambda f: (-f.remaining_tokens, *_tie(f)),
}


def check_victim_policy(owner: str, value: object) -> None:
    """Raise ValueError naming `owner`'s `victim_policy` field and the valid choices."""
    if value not in VICTIM_POLICIES:
        raise ValueError(f"{owner}: victim_policy={value!r}: valid: {', '.join(VICTIM_POLICIES)}")


def rank_victims(facts: Sequence[VictimFacts], policy: str, rng: random.Random) -> list[int]:
    """Indices into `facts`, the first victim first. `rng` is drawn from only by `random`."""
    if policy == "random":
        order = sorted(range(len(facts)), key=lambda i: _tie(facts[i]))
        rng.shuffle(order)
        return order
    if policy not in _KEYS:
        raise ValueError(f"rank_victims: policy {policy!r} is not ranked here; valid: "
                         f"{', '.join(_KEYS)}, random")
    key = _KEYS[policy]
    return sorted(range(len(facts)), key=lambda i: key(facts[i]), reverse=True)

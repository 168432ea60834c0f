"""Token ids for generated and replayed prompts.

Trace files carry lengths, not text, so prompts are made of seeded random ids (no two requests
share a prefix by accident), or of ids derived from a block id (Mooncake: the same id always
gives the same tokens). Multi-turn histories include earlier answers as the simulated executor
produces them (`sim_answer`), so a prefix cache sees a conversation's whole history.
"""

from __future__ import annotations

import numpy as np

from engines.executors.sim import rule_token

LOW_TOKEN_ID = 3  # keep clear of the special ids 0..2 (EOS is 2)
_VOCAB_CACHE: dict[int, np.ndarray] = {}


def _vocab(vocab_size: int) -> np.ndarray:
    """One shared int object per token id (an object array), so long prompts cost a pointer
    per token."""
    v = _VOCAB_CACHE.get(vocab_size)
    if v is None:
        v = _VOCAB_CACHE[vocab_size] = np.array(list(range(vocab_size)), dtype=object)
    return v


def as_token_list(ids: np.ndarray, vocab_size: int) -> list[int]:
    """A list of the ids in `ids` (all below `vocab_size`) that shares int objects."""
    if ids.size == 0:
        return []
    out: list[int] = _vocab(vocab_size)[ids].tolist()
    return out


def random_tokens(rng: np.random.Generator, n: int, vocab_size: int) -> list[int]:
    """`n` token ids drawn uniformly from [3, vocab_size)."""
    return as_token_list(rng.integers(LOW_TOKEN_ID, vocab_size, size=n), vocab_size)


def sim_answer(index: int, prompt_len: int, output_len: int, eos_token_id: int | None
               ) -> list[int]:
    """The `output_len` tokens the simulated executor samples for request `r<index>` with a
    prompt of `prompt_len` tokens and EOS at `output_len` (see `engines.executors.sim`)."""
    out = [rule_token(index, prompt_len + k) for k in range(output_len)]
    if eos_token_id is not None and out:
        out[-1] = eos_token_id
    return out

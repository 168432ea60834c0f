"""Run `vidur.main` with one runtime fix (Vidur's installed files are not touched).

vidur 0.0.26's `Request.restart()` (entities/request.py) resets the batch-level counters of a
request its vLLM scheduler restarts after running out of KV blocks, but not the stage-level
ones (`_num_stage_processed_tokens`, `_is_prefill_stage_complete`); the next batch stage
end then fails `assert self._num_stage_processed_tokens <= self.total_tokens`. Every run of
the bench_vs_vidur workload restarts requests, so as shipped it stops about 8 s into the
simulation. This resets those two counters too, as restart() does for the batch ones.
"""

from vidur.entities.request import Request
from vidur.main import main

_restart = Request.restart


def _restart_with_stage_counters(self: Request) -> None:
    _restart(self)
    self._num_stage_processed_tokens = 0
    self._is_prefill_stage_complete = False


Request.restart = _restart_with_stage_counters  # type: ignore[method-assign]

if __name__ == "__main__":
    main()

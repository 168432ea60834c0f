"""The waiting queue: FCFS (a deque) or priority (a heap).

Mirrors vllm/v1/core/sched/request_queue.py: FCFSRequestQueue, PriorityRequestQueue.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Protocol

from schedulers.vllm.request import VllmRequest


class RequestQueue(Protocol):
    def add_request(self, request: VllmRequest) -> None: ...
    def pop_request(self) -> VllmRequest: ...
    def peek_request(self) -> VllmRequest: ...
    def prepend_request(self, request: VllmRequest) -> None: ...
    def prepend_requests(self, requests: list[VllmRequest]) -> None: ...
    def remove_requests(self, requests: Iterable[VllmRequest]) -> None: ...
    def __len__(self) -> int: ...
    def __bool__(self) -> bool: ...
    def __iter__(self) -> Iterator[VllmRequest]: ...


class FCFSRequestQueue(deque[VllmRequest]):
    """Arrival order; a preempted request goes back to the head (`prepend_request`)."""

    def add_request(self, request: VllmRequest) -> None:
        self.append(request)

    def pop_request(self) -> VllmRequest:
        return self.popleft()

    def peek_request(self) -> VllmRequest:
        if not self:
            raise IndexError("peek from an empty queue")
        return self[0]

    def prepend_request(self, request: VllmRequest) -> None:
        self.appendleft(request)

    def prepend_requests(self, requests: list[VllmRequest]) -> None:
        """`requests` back at the head, in their order (mirrors FCFSRequestQueue.
        prepend_requests, which the scheduler feeds in reverse)."""
        self.extendleft(reversed(requests))

    def remove_requests(self, requests: Iterable[VllmRequest]) -> None:
        to_remove = set(requests)
        kept = [r for r in self if r not in to_remove]
        self.clear()
        self.extend(kept)


class PriorityRequestQueue:
    """Smallest (priority, arrival time, request id) first; prepending is just adding."""

    def __init__(self) -> None:
        self._heap: list[VllmRequest] = []

    def add_request(self, request: VllmRequest) -> None:
        heapq.heappush(self._heap, request)

    def pop_request(self) -> VllmRequest:
        if not self._heap:
            raise IndexError("pop from empty heap")
        return heapq.heappop(self._heap)

    def peek_request(self) -> VllmRequest:
        if not self._heap:
            raise IndexError("peek from empty heap")
        return self._heap[0]

    def prepend_request(self, request: VllmRequest) -> None:
        self.add_request(request)

    def prepend_requests(self, requests: list[VllmRequest]) -> None:
        for request in requests:
            self.add_request(request)

    def remove_requests(self, requests: Iterable[VllmRequest]) -> None:
        to_remove = set(requests)
        self._heap = [r for r in self._heap if r not in to_remove]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __iter__(self) -> Iterator[VllmRequest]:
        heap = self._heap[:]
        while heap:
            yield heapq.heappop(heap)


def create_request_queue(policy: str) -> FCFSRequestQueue | PriorityRequestQueue:
    """mirrors request_queue.py: create_request_queue."""
    if policy == "priority":
        return PriorityRequestQueue()
    if policy == "fcfs":
        return FCFSRequestQueue()
    raise ValueError(f"vllm scheduler: policy={policy!r}: valid: fcfs, priority")

"""The radix prefix cache (mirrors python/sglang/srt/mem_cache/radix_cache.py: RadixCache).

Keys are token lists, page-aligned; a node's value is the list of KV pages holding its key
(len(value) * page_size == len(key)). Recency is a logical clock: every match, insert and node
creation takes the next tick, as the oracle's counter replacing `time.monotonic` does, so the LRU
order is upstream's and replays are deterministic.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Protocol


class _PageFreer(Protocol):
    def free(self, pages: list[int]) -> None: ...


class TreeNode:
    __slots__ = ("children", "id", "key", "last_access_time", "lock_ref", "parent", "value")

    def __init__(self, node_id: int, stamp: int) -> None:
        self.children: dict[object, TreeNode] = {}
        self.parent: TreeNode | None = None
        self.key: list[int] = []
        self.value: list[int] = []
        self.lock_ref = 0
        # mirrors radix_cache.py: TreeNode.__init__ stamps a new node with the clock
        self.last_access_time = stamp
        self.id = node_id


def _common_prefix_len(a: list[int], b: Sequence[int], b_off: int, n: int) -> int:
    """Length of the common prefix of a[0:] and b[b_off:b_off + n] (n <= len(b) - b_off)."""
    m = len(a) if len(a) < n else n
    if (a if m == len(a) else a[:m]) == b[b_off:b_off + m]:
        return m
    # mirrors radix_cache.py: RadixKey.match_at (gallop in doubling windows, then bisect)
    lo, step = 0, 1
    while lo < m:
        hi = lo + step if lo + step < m else m
        if a[lo:hi] != b[b_off + lo:b_off + hi]:
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if a[lo:mid] == b[b_off + lo:b_off + mid]:
                    lo = mid
                else:
                    hi = mid
            return lo
        lo = hi
        step *= 2
    return m


class RadixCache:
    """Prefix tree over page-aligned token keys with lock references and LRU eviction.

    With `allocator` None it is the simulated tree SchedulePolicy uses for in-batch prefix
    caching (mirrors RadixCache.create_simulated): it holds keys only.
    """

    def __init__(self, page_size: int = 1, allocator: _PageFreer | None = None) -> None:
        self.page_size = page_size
        self.allocator = allocator
        self._clock = 0
        self._next_id = 0
        self.evictable_leaves: set[TreeNode] = set()
        self.reset()

    # ------------------------------------------------------------------ clock
    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _new_node(self) -> TreeNode:
        self._next_id += 1
        return TreeNode(self._next_id, self._tick())

    # ------------------------------------------------------------------ public API
    def reset(self) -> None:
        # mirrors radix_cache.py: RadixCache.reset
        self.root_node = self._new_node()
        self.root_node.lock_ref = 1
        self.evictable_size_ = 0
        self.protected_size_ = 0
        self.evictable_leaves.clear()

    def evictable_size(self) -> int:
        return self.evictable_size_

    def protected_size(self) -> int:
        return self.protected_size_

    def _child_key(self, key: Sequence[int], off: int) -> object:
        # mirrors radix_cache.py: RadixKey.child_key_at
        ps = self.page_size
        return key[off] if ps == 1 else tuple(key[off:off + ps])

    def match_prefix(self, key: Sequence[int], limit: int | None = None) -> tuple[int, TreeNode]:
        """Longest cached prefix of key[:limit], page-aligned: (its length, its last node).

        Splits the node the match ends inside. mirrors radix_cache.py: RadixCache.match_prefix
        """
        n = len(key) if limit is None or limit > len(key) else limit
        n = n // self.page_size * self.page_size
        if n <= 0:
            return 0, self.root_node
        return self._match_prefix_helper(key, n)

    def touch_prefix(self, key: Sequence[int]) -> None:
        # mirrors radix_cache.py: RadixCache.touch_prefix
        n = len(key) // self.page_size * self.page_size
        if n > 0:
            self._match_prefix_helper(key, n)

    def _match_prefix_helper(self, key: Sequence[int], n: int) -> tuple[int, TreeNode]:
        # mirrors radix_cache.py: RadixCache._match_prefix_helper
        access_time = self._tick()
        node = self.root_node
        node.last_access_time = access_time
        ps = self.page_size
        off = 0
        while off < n:
            child = node.children.get(key[off] if ps == 1 else tuple(key[off:off + ps]))
            if child is None:
                break
            child.last_access_time = access_time
            plen = _common_prefix_len(child.key, key, off, n - off)
            if ps > 1:
                plen = plen // ps * ps
            if plen < len(child.key):
                node = self._split_node(child, plen)
                off += plen
                break
            node = child
            off += plen
        return off, node

    def _split_node(self, child: TreeNode, split_len: int) -> TreeNode:
        # mirrors radix_cache.py: RadixCache._split_node (the new node is the upper part)
        ps = self.page_size
        new_node = self._new_node()
        parent = child.parent
        assert parent is not None
        new_node.children = {self._child_key(child.key, split_len): child}
        new_node.parent = parent
        new_node.lock_ref = child.lock_ref
        new_node.key = child.key[:split_len]
        new_node.value = child.value[: split_len // ps]
        child.parent = new_node
        child.key = child.key[split_len:]
        child.value = child.value[split_len // ps:]
        parent.children[self._child_key(new_node.key, 0)] = new_node
        return new_node

    def insert(self, key: Sequence[int], n: int, value: Sequence[int]) -> tuple[int, TreeNode]:
        """Insert key[:n] (n page-aligned) with pages `value` (one per page of the key).

        Returns the length already cached and the node the key ends at.
        mirrors radix_cache.py: RadixCache.insert / _insert_helper
        """
        ps = self.page_size
        access_time = self._tick()
        node = self.root_node
        node.last_access_time = access_time
        if n <= 0:
            return 0, node
        off = 0
        while off < n:
            child = node.children.get(key[off] if ps == 1 else tuple(key[off:off + ps]))
            if child is None:
                break
            node = child
            node.last_access_time = access_time
            plen = _common_prefix_len(node.key, key, off, n - off)
            if ps > 1:
                plen = plen // ps * ps
            off += plen
            if plen < len(node.key):
                node = self._split_node(node, plen)
        total_prefix_length = off
        if off < n:
            new_node = self._new_node()
            new_node.parent = node
            new_node.key = list(key[off:n])
            new_node.value = list(value[off // ps: n // ps])
            node.children[self._child_key(new_node.key, 0)] = new_node
            self.evictable_size_ += n - off
            self._update_leaf_status(node)
            self._update_leaf_status(new_node)
            node = new_node
        return total_prefix_length, node

    def evict(self, num_tokens: int, evicted_sizes: list[int] | None = None) -> int:
        """Free least-recently-used unlocked leaves until `num_tokens` tokens are freed; append
        each evicted node's size to `evicted_sizes` when given.

        mirrors radix_cache.py: RadixCache.evict (LRU strategy). The (access time, node id)
        order is total, so evicting N tokens in one call or over several calls frees the same
        nodes in the same order.
        """
        heap = [(x.last_access_time, x.id, x) for x in self.evictable_leaves]
        heapq.heapify(heap)
        num_evicted = 0
        while num_evicted < num_tokens and heap:
            _, _, x = heapq.heappop(heap)
            if self.allocator is not None:
                self.allocator.free(x.value)
            num_evicted += len(x.key)
            if evicted_sizes is not None:
                evicted_sizes.append(len(x.key))
            self._delete_leaf(x)
            parent = x.parent
            assert parent is not None
            if not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, (parent.last_access_time, parent.id, parent))
        return num_evicted

    def inc_lock_ref(self, node: TreeNode) -> None:
        # mirrors radix_cache.py: RadixCache.inc_lock_ref
        root = self.root_node
        while node is not root:
            if node.lock_ref == 0:
                n = len(node.key)
                self.evictable_size_ -= n
                self.protected_size_ += n
            node.lock_ref += 1
            self._update_leaf_status(node)
            parent = node.parent
            assert parent is not None
            node = parent

    def dec_lock_ref(self, node: TreeNode) -> None:
        # mirrors radix_cache.py: RadixCache.dec_lock_ref
        root = self.root_node
        while node is not root:
            if node.lock_ref == 1:
                n = len(node.key)
                self.evictable_size_ += n
                self.protected_size_ -= n
            node.lock_ref -= 1
            self._update_leaf_status(node)
            parent = node.parent
            assert parent is not None, "this node belongs to another tree"
            node = parent

    def path_pages(self, node: TreeNode) -> list[int]:
        """Pages on the path from the root to `node`.

        mirrors radix_cache.py: RadixCache.path_device_indices
        """
        parts: list[list[int]] = []
        root = self.root_node
        while node is not root:
            parts.append(node.value)
            parent = node.parent
            assert parent is not None
            node = parent
        out: list[int] = []
        for part in reversed(parts):
            out.extend(part)
        return out

    def total_size(self) -> int:
        total = 0
        stack = [self.root_node]
        while stack:
            x = stack.pop()
            total += len(x.key)
            stack.extend(x.children.values())
        return total

    def dfs_weight_order(self, last_nodes: Sequence[TreeNode]) -> list[int]:
        """Request indices in depth-first, heaviest-subtree-first order.

        mirrors base_prefix_cache.py: _dfs_weight_order
        """
        last_node_to_indices: dict[TreeNode, list[int]] = {}
        for index, node in enumerate(last_nodes):
            last_node_to_indices.setdefault(node, []).append(index)
        weight = {node: len(ix) for node, ix in last_node_to_indices.items()}
        stack: list[tuple[TreeNode, bool]] = [(self.root_node, False)]
        while stack:
            node, visited = stack.pop()
            if visited:
                w = weight.get(node, 0)
                for child in node.children.values():
                    w += weight.get(child, 0)
                weight[node] = w
                continue
            stack.append((node, True))
            for child in reversed(list(node.children.values())):
                stack.append((child, False))
        order: list[int] = []
        stack = [(self.root_node, False)]
        while stack:
            node, visited = stack.pop()
            if visited:
                order.extend(last_node_to_indices.get(node, ()))
                continue
            children = sorted(node.children.values(), key=lambda c: -weight.get(c, 0))
            stack.append((node, True))
            for child in reversed(children):
                stack.append((child, False))
        return order

    # ------------------------------------------------------------------ internals
    def _delete_leaf(self, node: TreeNode) -> None:
        # mirrors radix_cache.py: RadixCache._delete_leaf
        parent = node.parent
        assert parent is not None
        v = parent.children.pop(self._child_key(node.key, 0), None)
        assert v is node, "parent does not have the child key"
        self.evictable_size_ -= len(node.key)
        self.evictable_leaves.discard(node)
        self._update_leaf_status(parent)

    def _update_leaf_status(self, node: TreeNode) -> None:
        # mirrors radix_cache.py: RadixCache._update_leaf_status
        if node.lock_ref > 0 or node.children:
            self.evictable_leaves.discard(node)
        else:
            self.evictable_leaves.add(node)

"""RadixCache: page-aligned matching with node splits, insert, lock references, LRU eviction."""

from __future__ import annotations

from schedulers.sglang.memory_pool import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
from schedulers.sglang.radix_cache import RadixCache, TreeNode


def _tree(size: int = 100, page_size: int = 1) -> tuple[RadixCache, TokenToKVPoolAllocator]:
    alloc: TokenToKVPoolAllocator = (TokenToKVPoolAllocator(size) if page_size == 1
                                     else PagedTokenToKVPoolAllocator(size, page_size))
    return RadixCache(page_size, alloc), alloc


def _insert(tree: RadixCache, alloc: TokenToKVPoolAllocator, key: list[int]) -> TreeNode:
    ps = tree.page_size
    n = len(key) // ps * ps
    pages = alloc.alloc(n // ps)
    assert pages is not None
    prefix, node = tree.insert(key, n, pages)
    if prefix:  # the tree already had [0, prefix): give those pages back, as checkpoint does
        alloc.free(pages[: prefix // ps])
    return node


def test_empty_match_returns_root_without_touching_the_clock() -> None:
    tree, _ = _tree()
    clock = tree._clock
    assert tree.match_prefix([1, 2, 3]) == (0, tree.root_node)
    assert tree.match_prefix([1, 2, 3], limit=0) == (0, tree.root_node)
    assert tree._clock == clock + 1  # only the first one walked the tree
    assert tree.match_prefix([]) == (0, tree.root_node)
    assert tree._clock == clock + 1


def test_match_splits_the_node_it_ends_inside() -> None:
    tree, alloc = _tree()
    leaf = _insert(tree, alloc, [1, 2, 3, 4, 5])
    n, node = tree.match_prefix([1, 2, 3, 9])
    assert n == 3
    assert node is not leaf and node.key == [1, 2, 3]
    assert leaf.parent is node and leaf.key == [4, 5]
    assert tree.path_pages(node) == tree.path_pages(leaf)[:3]
    assert tree.total_size() == 5 and tree.evictable_size() == 5


def test_match_limit_keeps_one_token_to_compute() -> None:
    tree, alloc = _tree()
    _insert(tree, alloc, [1, 2, 3, 4])
    assert tree.match_prefix([1, 2, 3, 4], limit=3)[0] == 3
    assert tree.match_prefix([1, 2, 3, 4])[0] == 4


def test_insert_reports_cached_prefix_and_adds_the_rest() -> None:
    tree, alloc = _tree()
    _insert(tree, alloc, [1, 2, 3])
    pages = alloc.alloc(5)
    assert pages is not None
    prefix, node = tree.insert([1, 2, 3, 7, 8], 5, pages)
    assert prefix == 3 and node.key == [7, 8]
    assert tree.evictable_size() == 5
    prefix, node2 = tree.insert([1, 2], 2, pages)
    assert prefix == 2 and node2.key == [1, 2]  # splits, adds nothing
    assert tree.total_size() == 5


def test_page_aligned_matching() -> None:
    tree, alloc = _tree(64, page_size=4)
    _insert(tree, alloc, list(range(10, 22)))  # 12 tokens = 3 pages
    n, node = tree.match_prefix([*range(10, 20), 99, 98])
    assert n == 8 and len(node.key) == 8  # page-floored: a partial page never matches
    assert len(tree.path_pages(node)) == 2
    assert tree.match_prefix(list(range(10, 13)))[0] == 0  # shorter than a page
    # a key differing inside the first page has no child at all
    assert tree.match_prefix([10, 11, 12, 0, 14, 15, 16, 17])[0] == 0


def test_lock_moves_tokens_between_evictable_and_protected() -> None:
    tree, alloc = _tree()
    leaf = _insert(tree, alloc, [1, 2, 3, 4])
    _, mid = tree.match_prefix([1, 2, 5])
    tree.inc_lock_ref(leaf)
    assert (tree.evictable_size(), tree.protected_size()) == (0, 4)
    tree.inc_lock_ref(mid)
    assert mid.lock_ref == 2 and leaf.lock_ref == 1
    tree.dec_lock_ref(leaf)
    assert (tree.evictable_size(), tree.protected_size()) == (2, 2)
    tree.dec_lock_ref(mid)
    assert (tree.evictable_size(), tree.protected_size()) == (4, 0)


def test_split_inherits_lock_ref() -> None:
    tree, alloc = _tree()
    leaf = _insert(tree, alloc, [1, 2, 3, 4])
    tree.inc_lock_ref(leaf)
    _, upper = tree.match_prefix([1, 2, 9])
    assert upper.lock_ref == 1
    tree.dec_lock_ref(leaf)  # walks through the new upper node
    assert upper.lock_ref == 0 and tree.protected_size() == 0 and tree.evictable_size() == 4


def test_lru_eviction_order_and_locked_nodes() -> None:
    tree, alloc = _tree(20)
    a = _insert(tree, alloc, [1, 1, 1])
    b = _insert(tree, alloc, [2, 2, 2])
    c = _insert(tree, alloc, [3, 3, 3])
    tree.match_prefix([1, 1, 1])  # a is now the most recent
    tree.inc_lock_ref(c)
    free_before = alloc.available_size()
    assert tree.evict(1) == 3  # whole leaves: b, the least recently used unlocked one
    assert b.parent is not None and [2, 2, 2][0] not in tree.root_node.children
    assert alloc.available_size() == free_before + 3
    assert tree.evict(100) == 3  # then a; c is locked
    assert list(tree.root_node.children) == [3]
    assert tree.evictable_size() == 0 and tree.protected_size() == 3
    assert a.key == [1, 1, 1]


def test_eviction_climbs_to_parents_that_become_leaves() -> None:
    tree, alloc = _tree()
    _insert(tree, alloc, [1, 2, 3, 4])
    _insert(tree, alloc, [1, 2, 5, 6])
    assert tree.evict(5) == 6  # both leaves (2 each), then their parent [1, 2]
    assert tree.total_size() == 0 and alloc.available_size() == 100


def test_dfs_weight_order_groups_by_subtree() -> None:
    tree, alloc = _tree()
    x = _insert(tree, alloc, [1, 2, 3])
    y = _insert(tree, alloc, [1, 2, 4])
    z = _insert(tree, alloc, [7, 8])
    root = tree.root_node
    # requests 0..4 whose matches ended at these nodes
    order = tree.dfs_weight_order([z, x, root, y, x])
    # subtree [1, 2] holds 3 requests: first; inside it x (2) before y (1); then z; root last
    assert order == [1, 4, 3, 0, 2]

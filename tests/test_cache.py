"""phaze._cache.Memo: the one bounded memo (least recently used goes first)."""
import threading

from hypothesis import given, strategies as st

from phaze._cache import Memo


def test_lru_order_and_bound():
    m = Memo(2)
    m.put("a", 1)
    m.put("b", 2)
    assert m.get("a") == 1          # a is now the most recent
    m.put("c", 3)                   # b goes
    assert "b" not in m and m.get("a") == 1 and m.get("c") == 3 and len(m) == 2
    assert m.get("b", "none") == "none"
    assert (m.hits, m.misses) == (3, 1)


def test_callable_size_and_zero():
    size = [1]
    m = Memo(lambda: size[0])
    m.put(1, 1)
    m.put(2, 2)
    assert len(m) == 1 and 2 in m
    size[0] = 0
    m.put(3, 3)
    assert 3 not in m


def test_get_or_compute_computes_once():
    calls = []
    m = Memo(8)
    for _ in range(3):
        assert m.get_or_compute("k", lambda: calls.append(1) or 42) == 42
    assert calls == [1]


@given(st.lists(st.integers(0, 20), max_size=200), st.integers(1, 6))
def test_matches_a_naive_lru(keys, size):
    m = Memo(size)
    naive = []                       # most recent last
    for k in keys:
        if m.get(k) is None:
            m.put(k, k)
            naive.append(k)
        else:
            naive.remove(k)
            naive.append(k)
        naive = naive[-size:]
        assert sorted(naive) == sorted(m._data)


def test_threads_share_it_safely():
    m = Memo(50)

    def work(base):
        for i in range(2000):
            m.put((base, i % 70), i)
            m.get((base, (i * 7) % 70))

    threads = [threading.Thread(target=work, args=(b,)) for b in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(m) == 50

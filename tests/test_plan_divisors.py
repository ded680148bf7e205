"""Issue 30: a search whose global batch has hundreds of divisors on millions of devices
reaches its first result in seconds. The rank layout of a geometry cell (t, cp, ep, p, d)
ran over every data-parallel index j < d (d up to the devices: 159 s for bert-large on
2²⁴ h200s at a global batch of 21,621,600, 576 divisors); a boundary's node bits depend
on j·t modulo the node size only, so j < min(d, node size) gives the same layout, checked
here against the slow reference (tests/naive_step.py keeps the loop over every j)."""
import time

import numpy as np

import naive_step
from phaze.step import _kernels as kern


def _bits(arrays):
    return [np.ascontiguousarray(a).view(np.uint8).tobytes() for a in arrays]


def _cells():
    rows = []
    for t in (1, 2, 3, 4, 8):
        for cp, ep in ((1, 1), (2, 1), (1, 2), (2, 4)):
            for p in (1, 2, 3, 5):
                for d in (1, 3, 4, 7, 9, 16, 24, 37, 64):
                    if (cp * d) % ep == 0:
                        rows.append((t, cp, ep, p, d))
    return [np.ascontiguousarray(c, dtype=np.int64) for c in zip(*rows)]


def test_layout_of_wide_data_parallel_cells_matches_the_reference():
    cells = _cells()
    ns_values = np.array([2, 4, 6, 8, 12], dtype=np.int64)   # d above and below each size
    devices = 1 << 20
    got = kern.build_geometry(*cells, ns_values, devices)
    want = naive_step.build_geometry(*cells, ns_values, devices)
    assert _bits(got) == _bits(want)


def test_a_cell_of_billions_of_data_parallel_ranks_takes_no_time():
    # t = node size: the receiver never spans two nodes, so no early exit from the loop
    # over j, which ran 2·2³⁴ times before (minutes)
    cells = [np.array([v], dtype=np.int64) for v in (8, 1, 1, 2, 1 << 34)]
    t0 = time.perf_counter()
    off, stages, cell = kern.build_geometry(*cells, np.array([8], dtype=np.int64), 1 << 40)
    assert time.perf_counter() - t0 < 2.0
    # every boundary between the two stages crosses nodes (2·t·d ranks apart), none wide:
    # bit 2·inter + wide = bit 2
    assert stages["mask"].tolist() == [4, 4]
    assert stages["dp_nodes"].tolist() == [1 << 34, 1 << 34]   # one rank per node's ring step

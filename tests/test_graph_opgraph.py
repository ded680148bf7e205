import numpy as np
import pytest

from phaze.graph import OpGraph


def test_from_ops_builds_csr_and_order():
    g = OpGraph.from_ops([
        dict(name="a", kind=0, dims=(1, 4, 4, 4)),
        dict(name="b", kind=1, preds=["a"], elements=16, cycles_per_element=1.0),
        dict(name="c", kind=3, preds=["a", "b"], comm_bytes=32, group_size=2),
    ])
    assert g.n_ops == 3
    assert list(g.pred_ptr) == [0, 0, 1, 3]
    assert list(g.order) == [0, 1, 2]
    assert g.flops[0] == 2 * 4 * 4 * 4
    assert g.content_hash() == OpGraph.from_ops([
        dict(name="x", kind=0, dims=(1, 4, 4, 4)),
        dict(name="y", kind=1, preds=[0], elements=16, cycles_per_element=1.0),
        dict(name="z", kind=3, preds=[0, 1], comm_bytes=32, group_size=2),
    ]).content_hash()


def test_cycle_is_named():
    with pytest.raises(ValueError, match="cycle through 'a', 'b'"):
        OpGraph.from_ops([dict(name="a", kind=0, preds=["b"]), dict(name="b", kind=1, preds=["a"])])


@pytest.mark.parametrize("field,value,match", [
    ("kind", 7, "kind must be"),
    ("elements", -1, "elements must be >= 0"),
    ("cycles_per_element", float("nan"), "cycles_per_element"),
    ("group_size", 0, "group_size"),
])
def test_bad_fields_are_named(field, value, match):
    with pytest.raises(ValueError, match=match):
        OpGraph.from_ops([{"name": "a", "kind": 1, field: value}])


def test_arrays_are_read_only():
    g = OpGraph.from_ops([dict(name="a", kind=1, elements=3)])
    with pytest.raises(ValueError):
        g.elements[0] = 5
    assert np.asarray(g.kind).dtype == np.int8

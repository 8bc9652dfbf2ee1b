"""A finding's metadata holding a float of a subclass (``numpy.float64`` is one): learned as its
plain float, not a bare ``TypeError`` out of ``learn``."""

from __future__ import annotations

import orjson

import memory


class Score(float):
    """A float of a subclass, as ``numpy.float64`` is."""


def test_a_float_subclass_in_metadata_is_learned_as_its_plain_float(store: memory.MemoryStore) -> None:
    with store.session(scope="scores") as session:
        finding = {"text": "a scored finding", "tags": ["s"], "metadata": {"score": Score(0.5)}}
        learned = session.learn(finding)
        (found,) = session.recall(meta={"score": 0.5})
    assert found.key == learned.id
    assert dict(found.metadata) == {"score": 0.5} and type(found.metadata["score"]) is float
    assert orjson.loads(learned.path.read_bytes())["metadata"] == {"score": 0.5}

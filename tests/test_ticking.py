"""``edge_anime.ticking``: the callback runs while the block does, and its thread is gone when the block ends,
also when the block raises."""
from __future__ import annotations

import threading

import pytest
from deadlines import scaled

from edge_anime.ticking import ticking

DEADLINE_S = scaled(10.0)


def test_ticks_while_the_block_runs_and_stops_with_it() -> None:
    ticked = threading.Event()
    count = 0

    def tick() -> None:
        nonlocal count
        count += 1
        if count >= 3:
            ticked.set()

    with ticking(0.01, tick, name="test-ticker"):
        assert ticked.wait(DEADLINE_S)
    after = count
    assert not any(t.name == "test-ticker" for t in threading.enumerate())
    assert count == after  # nothing ticks once the block is over


def test_the_thread_is_joined_when_the_block_raises() -> None:
    with pytest.raises(RuntimeError, match="the block failed"), ticking(0.01, lambda: None, name="test-raiser"):
        raise RuntimeError("the block failed")
    assert not any(t.name == "test-raiser" for t in threading.enumerate())

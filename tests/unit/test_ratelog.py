"""aio/ratelog.py: at most one line per key per interval, the lines held back counted into the next
one, and a bounded number of keys remembered."""

import logging

from tidings.aio.ratelog import RateLimitedLog


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def lines(caplog):
    return [r.getMessage() for r in caplog.records]


def test_one_line_per_key_per_interval_with_the_held_back_count(caplog):
    clock = Clock()
    log = RateLimitedLog(logging.getLogger("test.ratelog"), 1.0, clock=clock)
    with caplog.at_level(logging.WARNING, "test.ratelog"):
        assert log.log(logging.WARNING, "10.0.0.1", "refused %s", "a")
        assert not any(log.log(logging.WARNING, "10.0.0.1", "refused %s", "b") for _ in range(5))
        assert log.log(logging.WARNING, "10.0.0.2", "refused %s", "c")  # another key: its own budget
        clock.now += 0.999
        assert not log.log(logging.WARNING, "10.0.0.1", "refused %s", "d")
        clock.now += 0.001
        assert log.log(logging.WARNING, "10.0.0.1", "refused %s", "e")
        clock.now += 5
        assert log.log(logging.WARNING, "10.0.0.1", "refused %s", "f")
    assert lines(caplog) == ["refused a", "refused c",
                             "refused e (and 6 more like it since the last such line, held back)", "refused f"]


def test_the_keys_remembered_are_bounded_and_a_flood_of_keys_shares_one_budget(caplog):
    clock = Clock()
    log = RateLimitedLog(logging.getLogger("test.ratelog"), 1.0, keys_max=4, clock=clock)
    with caplog.at_level(logging.WARNING, "test.ratelog"):
        for i in range(100):  # a flood from many addresses at one instant
            log.log(logging.WARNING, f"h{i}", "from %s", f"h{i}")
        assert len(log.keys) == 5  # keys_max, and the shared budget of the rest
        assert lines(caplog) == ["from h0", "from h1", "from h2", "from h3", "from h4"]
        clock.now += 2
        log.log(logging.WARNING, "new", "from %s", "new")  # keys quiet for longer than the interval go first
        assert log.keys == ["new"]
    assert lines(caplog)[-1] == "from new"

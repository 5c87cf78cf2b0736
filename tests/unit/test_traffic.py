"""ChannelTraffic (core/publish/traffic.py): bounded per-channel counts; and what a subend reports of itself."""

from tidings.core.filters import parse_filter
from tidings.core.publish.traffic import OTHER, ChannelTraffic
from tidings.core.subscription.subend import Subend


def test_counts_rank_busiest_first_and_sum_the_rest():
    t = ChannelTraffic()
    t.count(["a", "b", "b", "c", "c", "c"])
    assert t.top() == {"c": 3, "b": 2, "a": 1}
    assert t.top(2) == {"c": 3, "b": 2, OTHER: 1}


def test_channels_past_the_limit_are_counted_together():
    t = ChannelTraffic(channels_max=2)
    t.count(["a", "b", "x", "y", "a"])
    assert t.top() == {"a": 2, OTHER: 2, "b": 1}
    assert sum(t.top(1).values()) == 5  # nothing is lost from the total


def test_subend_status_reports_pattern_filter_mode_and_lag():
    s = Subend(1, conn=7, sub=3, pattern="a/#", flt=parse_filter("n > 2"), position=100, end=None)
    assert s.status(synced_tick=160) == {"sub": 3, "pattern": "a/#", "filter": "n > 2", "mode": "catching up",
                                         "position": 100, "lag_ticks": 60}
    s.go_live(160)
    assert s.status(synced_tick=500)["mode"] == "live" and s.status(synced_tick=500)["lag_ticks"] == 0
    bounded = Subend(2, conn=7, sub=4, pattern="a", flt=None, position=10, end=40)
    assert bounded.status(synced_tick=500) == {"sub": 4, "pattern": "a", "filter": None, "mode": "bounded",
                                                    "position": 10, "lag_ticks": 30}
    total = Subend(3, conn=7, sub=5, pattern="a", flt=None, position=0, end=None, total=True)
    assert total.status(500)["mode"] == "total order" and total.status(500)["lag_ticks"] is None

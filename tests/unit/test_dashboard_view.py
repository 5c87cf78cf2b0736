"""The dashboard's cluster view (aio/dashboard.py) put together from brokers' statuses: links,
trees and the traffic timeline, without a network (the view of a broker with no open peers)."""

import asyncio

from tidings.aio.dashboard import ClusterView, _links, _trees


def status(address, peers=(), trees=(), channels=None):
    return {"pubend": "p" + address[-1], "overlay": {"address": address, "node_id": "ab" * 16, "joined": True},
            "peers": list(peers), "trees": list(trees), "channels": channels or {}}


def test_links_are_one_per_pair_with_each_ends_rtt():
    statuses = {
        "h:1": status("h:1", peers=[{"address": "h:2", "state": "open", "rtt_ms": 0.5},
                                    {"address": "h:3", "state": "dialling", "rtt_ms": None}]),
        "h:2": status("h:2", peers=[{"address": "h:1", "state": "open", "rtt_ms": 0.7}]),
    }
    assert _links(statuses) == [{"a": "h:1", "b": "h:2", "rtt_ms": {"h:1": 0.5, "h:2": 0.7}}]


def test_trees_gather_root_forwarders_and_members_from_every_broker():
    statuses = {
        "h:1": status("h:1", trees=[{"name": "a/#", "role": "root", "parent": None, "children": ["h:2"],
                                     "member": False}]),
        "h:2": status("h:2", trees=[{"name": "a/#", "role": "forwarder+member", "parent": "h:1",
                                     "children": ["h:3"], "member": True}]),
        "h:3": status("h:3", trees=[{"name": "a/#", "role": "member", "parent": "h:2", "children": [],
                                     "member": True}]),
    }
    [tree] = _trees(statuses)
    assert tree["name"] == "a/#" and tree["root"] == "h:1"
    assert [(n["address"], n["parent"], n["member"]) for n in tree["nodes"]] == [
        ("h:1", None, False), ("h:2", "h:1", True), ("h:3", "h:2", True)]


def test_timeline_rates_come_from_successive_readings_and_never_go_negative():
    counts = iter([{"x": 0, "y": 5}, {"x": 10, "y": 5}, {"x": 30, "y": 2}])
    view = ClusterView(lambda: status("h:1", channels=next(counts)), "h:1", refresh_s=1.0)

    async def three():
        return [await view.snapshot() for _ in range(3)]

    snaps = asyncio.run(three())
    assert snaps[0]["timeline"]["series"] == {"y": [], "x": []}
    series = snaps[2]["timeline"]["series"]
    assert len(series["x"]) == 2 and all(v > 0 for v in series["x"]) and series["y"][1] == 0
    assert snaps[2]["brokers"] == [{"address": "h:1", "node_id": "ab" * 16, "joined": True, "pubend": "p1"}]
    assert snaps[2]["served_by"] == "h:1" and snaps[2]["links"] == [] and snaps[2]["trees"] == []

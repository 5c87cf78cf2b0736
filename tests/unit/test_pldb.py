"""The PLDB pipeline's parts without brokers: the audit, the tuple store's SQLite side, finding Java."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.core.event import Event
from tidings.pldb import audit
from tidings.pldb.tuple_store import Stream, TupleStore, journal, query_seq
from tidings.spark.java import java_major


def report(tick, host, **attrs):
    return Event("p1", tick, f"nodes/{host}/{next(iter(attrs))}", {"host": host, **attrs}, "pldb", "m", b"")


def test_stream_faults_count_each_kind():
    want = [("a", 1), ("a", 2), ("b", 1), ("a", 3)]
    assert audit.stream_faults([("a", 1), ("b", 1), ("a", 2), ("a", 3)], want) == {
        "lost": 0, "duplicated": 0, "reordered": 0, "unexpected": 0}  # no order across lanes
    assert audit.stream_faults([("a", 2), ("a", 1), ("a", 2), ("c", 9)], want) == {
        "lost": 2, "duplicated": 1, "reordered": 1, "unexpected": 1}


@given(st.lists(st.lists(st.tuples(st.sampled_from("xy"), st.integers(0, 4)), max_size=6), max_size=5),
       st.randoms())
def test_batch_order_allows_any_order_within_a_micro_batch(batches, rng):
    got = []
    for b, items in enumerate(batches):  # batch b's positions are above every earlier batch's
        shuffled = [(lane, b, b * 10 + pos) for lane, pos in items]
        rng.shuffle(shuffled)
        got += shuffled
    assert audit.batch_order_faults(got) == 0


def test_batch_order_counts_an_older_item_in_a_later_micro_batch_and_a_batch_going_back():
    assert audit.batch_order_faults([("x", 0, 5), ("x", 0, 3), ("x", 1, 4), ("y", 1, 1), ("x", 0, 9)]) == 2


def test_windows_are_cut_as_spark_cuts_tumbling_windows():
    assert audit.windows([("eu", 1_999_999), ("eu", 2_000_000), ("eu", 3_999_999), ("us", 0)], 2_000_000) == {
        ("eu", 0): 1, ("eu", 2_000_000): 2, ("us", 0): 1}


def test_java_versions():
    assert java_major('openjdk version "17.0.15" 2025-04-15') == 17
    assert java_major('java version "1.8.0_402"') == 8
    assert java_major('openjdk version "21" 2023-09-19') == 21
    assert java_major("no java here") is None


def test_the_store_keeps_latest_properties_and_answers_with_hosts_or_the_reason(tmp_path):
    store = TupleStore(tmp_path / "s.sqlite")
    store.commit(Stream.PROPERTIES, [report(1, "h1", load=2.0, site="eu"), report(2, "h2", load=5.0, site="eu"),
                                     report(3, "h1", load=4.5, site="eu")], "tk-a")
    assert store.host("h1") == {"host": "h1", "load": 4.5, "site": "eu"}
    query = Event("p2", 7, "pldb/query/q1", {"filter": 'site = "eu" and load > 4'}, "q", "q", b"")
    answer = store.answer(query)
    assert answer.channel == "pldb/answer/q1" and answer.seq == query_seq("p2", 7)
    assert json.loads(answer.payload) == {"query": "q1", "hosts": ["h1", "h2"], "count": 2, "truncated": False}
    bad = store.answer(Event("p2", 8, "pldb/query/q2", {"filter": "load >"}, "q", "q", b""))
    assert bad.error and json.loads(bad.payload)["error"] == bad.error and bad.attributes["error"] == bad.error
    missing = store.answer(Event("p2", 9, "pldb/query/q3", {}, "q", "q", b""))
    assert "filter" in (missing.error or "")
    store.commit(Stream.QUERIES, [query], "tk-q", [answer], gaps=2)
    assert store.counter("gaps_queries") == 2
    store.close()
    again = TupleStore(tmp_path / "s.sqlite")  # a restart: the positions are those of the last commit
    assert again.token(Stream.PROPERTIES) == "tk-a" and again.token(Stream.QUERIES) == "tk-q"
    assert again.token(Stream.RECOMMENDATIONS) is None
    applied = [(p, t) for p, t, _, _ in journal(tmp_path / "s.sqlite", Stream.PROPERTIES)]
    assert applied == [("p1", 1), ("p1", 2), ("p1", 3)]


def test_the_store_is_bounded_and_a_failed_batch_leaves_nothing(tmp_path):
    store = TupleStore(tmp_path / "s.sqlite", hosts_max=1, journal_rows_max=2, answer_hosts_max=0)
    store.commit(Stream.PROPERTIES, [report(1, "h1", load=1.0), report(2, "h2", load=1.0), report(3, "h1", load=2.0)],
                 "tk")
    assert store.host("h2") == {} and store.counter("hosts_refused") == 1 and store.counter("journal_dropped") == 1
    assert json.loads(store.answer(Event("p", 1, "pldb/query/q", {"filter": "load > 0"}, "q", "q", b"")).payload)[
        "truncated"] is True


def test_a_batch_that_fails_half_way_leaves_nothing(tmp_path, monkeypatch):
    store = TupleStore(tmp_path / "s.sqlite")
    store.commit(Stream.PROPERTIES, [report(1, "h1", load=1.0)], "tk")
    calls = []

    def journal_then_fail(*args):
        calls.append(args)
        if len(calls) == 2:
            raise OSError("disk gone")
        return TupleStore._journal(store, *args)

    monkeypatch.setattr(store, "_journal", journal_then_fail)
    with pytest.raises(OSError):
        store.commit(Stream.PROPERTIES, [report(2, "h1", load=9.0), report(3, "h2", load=9.0)], "tk-later")
    assert store.token(Stream.PROPERTIES) == "tk" and store.host("h1")["load"] == 1.0 and store.host("h2") == {}
    assert len(journal(tmp_path / "s.sqlite", Stream.PROPERTIES)) == 1

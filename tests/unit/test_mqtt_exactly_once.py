"""The persistent sessions' QoS 2 keys (core/mqtt/exactly_once.py) on their own: rebuilt from the saved
state and the dedup window, the counter above both, a damaged state read as none, idle sessions
pruned by a save and opened again when they publish."""

from tidings.core.mqtt.exactly_once import PID_BITS, QosTwoKeys, producer_of
from tidings.core.publish.dedup import DedupWindow, scoped

WINDOW_US = 1_000_000


def window() -> DedupWindow:
    return DedupWindow(WINDOW_US, 1000, 100)


def test_keys_logged_after_the_last_save_are_awaiting_and_the_counter_resumes_above_them():
    dedup = window()
    keys = QosTwoKeys(dedup)
    keys.open("s", 10)
    first = keys.key("s", 5, 10)
    keys.release("s", 5)
    saved = keys.take_save(10)
    assert saved is not None
    keys.done(saved.version)
    later = keys.key("s", 6, 20)  # logged after the save, then the broker dies
    dedup.remember("s", first, 100)
    dedup.remember("s", later, 101)
    again = QosTwoKeys(dedup, saved.data)
    session = again.open("s", 30)
    assert session.keys == {6: later}  # 5 was released (its generation is below the saved counter)
    assert again.logged("s") == [6]
    assert again.key("s", 5, 30) >> PID_BITS == 2  # a new use of 5: above every generation known


def test_a_damaged_state_reads_as_none_and_the_log_keys_stand():
    dedup = window()
    dedup.remember("s", 3 << PID_BITS | 9, 100)
    keys = QosTwoKeys(dedup, b"\x93garbage")
    assert keys.open("s", 0).keys == {9: 3 << PID_BITS | 9}


def test_an_idle_session_pruned_by_a_save_is_opened_again_when_it_publishes():
    keys = QosTwoKeys(window())
    keys.open("idle", 0)
    keys.open("busy", 0)
    keys.key("busy", 1, 0)
    keys.release("busy", 1)
    assert keys.take_save(3 * WINDOW_US) is not None  # both idle past two windows, nothing held
    assert keys.sessions == {}
    assert keys.key("idle", 7, 3 * WINDOW_US) == 7  # (no KeyError: opened again)
    assert keys.clear(scoped("svc", producer_of("never-seen")), 0) == keys.version  # nothing to forget


def test_a_long_client_id_makes_a_valid_producer():
    assert len(producer_of("é" * 200).encode()) <= 256

"""The configuration file's cross-key checks: each refused with a message that names the keys."""

import pytest

from tidings.core.config import BrokerConfig, ConfigError

MIB = 1024 * 1024


@pytest.mark.parametrize(("values", "message"), [
    ({"frame_bytes_max": 1 * MIB, "event_bytes_max": 1 * MIB}, "frame_bytes_max must exceed event_bytes_max"),
    ({"keepalive_interval_ns": 5, "failure_timeout_ns": 5}, "keepalive_interval_ns must be shorter"),
    ({"leaf_set_size": 7}, "leaf_set_size must be even"),
    # a window narrower than one log read lets a read go only when it is empty: answers crawl
    ({"retransmit_window_bytes": 512 * 1024}, "retransmit_window_bytes must be at least log_read_bytes_max"),
])
def test_keys_that_do_not_fit_together_are_refused(values, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_mapping(values)


def test_the_defaults_and_a_window_of_one_read_are_accepted():
    assert BrokerConfig.from_mapping({}).retransmit_window_bytes == 4 * BrokerConfig().log_read_bytes_max
    BrokerConfig.from_mapping({"retransmit_window_bytes": 64 * 1024, "log_read_bytes_max": 64 * 1024})

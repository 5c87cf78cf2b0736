"""Helpers for tests, ours and users': run real brokers on loopback and wait on conditions."""

from tidings.testing.broker_process import BrokerProcess, wait_for

__all__ = ["BrokerProcess", "wait_for"]

"""Helpers for tests, ours and users': run real brokers on loopback and wait on conditions."""

from tidings.testing.broker_process import BrokerProcess, wait_for
from tidings.testing.cluster import LOCAL_LIVENESS, Cluster

__all__ = ["LOCAL_LIVENESS", "BrokerProcess", "Cluster", "wait_for"]

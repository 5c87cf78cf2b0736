"""Peer links between brokers: handshake, cluster credential, queues and round trips."""

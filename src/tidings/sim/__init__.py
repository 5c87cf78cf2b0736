"""The simulator runtime: the broker core driven in virtual time, deterministic for a seed.

world.py (scheduler, randomness, trace) - network.py (TCP-like streams, latency, flow control) -
disk.py (the pubend log with volatile writes, group commit, crash) - broker_node.py (a Broker core
hosted on them) - clients.py (publishers and subscribers over ClientSession) - faults.py (crashes,
drops) - checker.py (acknowledged is durable, exactly-once delivery) - scenario.py (runs to check).

No asyncio, sockets, threads or clocks here: the only time is the world's `now`.
"""

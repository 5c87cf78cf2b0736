"""The overlay simulator: thousands to 100,000 brokers' Pastry and Scribe cores on one World.

topology.py (the proximity metric), net.py (whole messages, one latency each), sim.py (the runtime's
part for every host, faults, the oracle), steady.py and build.py (building an overlay), lookups.py
and experiment.py (the Pastry routing experiments), scribe.py (trees). docs/experiments.md gives
the commands and the figures.
"""

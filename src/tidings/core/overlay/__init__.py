"""Pastry: nodeIds, routing table, leaf set, neighbourhood set, join, keep-alives and repair."""

"""The broker's composer and its connection-level machines: the connection table, dispatch of
inputs to the machines that own them, effect routing, and the Pastry-Scribe glue.
"""

"""Scribe: one multicast tree per tree key over Pastry, and the mapping of channels onto trees."""

"""Gryphon's reliability layer: pubends and their tick streams."""

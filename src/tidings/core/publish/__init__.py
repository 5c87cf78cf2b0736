"""The publish side of a pubend's broker: the intake's checks, idempotent-publish dedup, tick
allocation and the log append.
"""

"""Durable subscriptions: checkpoint tokens, registrations, the persistent filtering subsystem's
constream and release.
"""

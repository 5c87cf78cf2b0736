"""Gryphon's durable subscriptions: checkpoint tokens and the rules that move them."""

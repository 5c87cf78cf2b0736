"""The network runtime: asyncio (uvloop when installed) driving the sans-IO broker core."""

"""The client side's sans-IO machines, shared by the asyncio, blocking and simulated clients."""

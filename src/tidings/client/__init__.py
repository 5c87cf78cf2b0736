"""The Python client: `Client` (asyncio) and, in `tidings.sync`, a blocking facade."""

from tidings.client.client import Client, Gap, PublishResult, Subscription

__all__ = ["Client", "Gap", "PublishResult", "Subscription"]

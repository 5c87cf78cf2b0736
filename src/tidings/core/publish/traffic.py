"""Events published per channel, for the dashboard's traffic timeline (PsEPR's "timescale graph of
traffic patterns").

The broker counts, for each channel, the events its own clients published and it logged; a viewer
turns two readings of these cumulative counts into a rate. Memory is bounded: at most
`channels_max` channels are counted by name; events on channels first seen after that are counted
together under `OTHER` (a name no channel can have). Counts only grow, so a viewer that sums the
readings of every broker of a cluster gets the cluster's traffic per channel.
"""

from __future__ import annotations

from collections import Counter

OTHER = "(other)"
CHANNELS_COUNTED_MAX = 1024
CHANNELS_REPORTED_MAX = 32
BATCH_TALLIED_MIN = 8  # events in a batch from which a Counter pays for itself


class ChannelTraffic:
    __slots__ = ("_counts", "channels_max")

    def __init__(self, channels_max: int = CHANNELS_COUNTED_MAX) -> None:
        self.channels_max = channels_max
        self._counts: dict[str, int] = {}

    def count(self, channels: list[str]) -> None:
        """One event published on each of `channels` (repeats allowed). This is on the publish path:
        a large batch is tallied first (Counter counts in C, and a batch holds few distinct channels),
        a small one directly (building a Counter costs more than it saves)."""
        tally = Counter(channels).items() if len(channels) > BATCH_TALLIED_MIN else ((ch, 1) for ch in channels)
        for channel, n in tally:
            self.tally(channel, n)

    def tally(self, channel: str, n: int) -> None:
        """`n` events published on `channel` (a batch on one channel: counted without a list)."""
        counts = self._counts
        if channel in counts:
            counts[channel] += n
        elif len(counts) < self.channels_max:
            counts[channel] = n
        else:
            counts[OTHER] = counts.get(OTHER, 0) + n

    def top(self, n: int = CHANNELS_REPORTED_MAX) -> dict[str, int]:
        """The `n` busiest channels' counts since the broker started, busiest first (ties by name);
        the rest summed under `OTHER`."""
        ranked = sorted(self._counts.items(), key=lambda kv: (-kv[1], kv[0]))
        out = dict(ranked[:n])
        rest = sum(count for _, count in ranked[n:])
        if rest:
            out[OTHER] = out.get(OTHER, 0) + rest
        return out

"""The nack repetition threshold (NRT), estimated from nack round trips as TCP estimates its RTO.

Gryphon's subend repeats an unanswered nack every NRT, "estimated by the subend based on the
round-trip response to previous nacks" (§3.2). Each upstream broker gets a `RoundTrip`: a sample is
the time from a nack to the knowledge that moved the stream past it; the smoothed round trip and
its variation follow Jacobson and Karels (gains 1/8 and 1/4), and the threshold is
srtt + 4 * rttvar, kept between the configured minimum and maximum. While nacks go unanswered the
caller doubles the threshold (a pubend that is down); the next answer brings it back to the estimate.
As in TCP (Karn's rule), the caller takes no sample from an answer that follows a repeated nack: it
may answer an earlier one, or end an outage, and one such sample of seconds held the threshold near
its cap for many rounds.
"""

from __future__ import annotations


class RoundTrip:
    __slots__ = ("rttvar_ns", "srtt_ns")

    def __init__(self) -> None:
        self.srtt_ns: int | None = None
        self.rttvar_ns = 0

    def sample(self, rtt_ns: int) -> None:
        rtt_ns = max(0, rtt_ns)
        if self.srtt_ns is None:
            self.srtt_ns, self.rttvar_ns = rtt_ns, rtt_ns // 2
            return
        self.rttvar_ns += (abs(self.srtt_ns - rtt_ns) - self.rttvar_ns) // 4
        self.srtt_ns += (rtt_ns - self.srtt_ns) // 8

    def threshold(self, floor_ns: int, ceiling_ns: int) -> int:
        if self.srtt_ns is None:
            return floor_ns
        return min(ceiling_ns, max(floor_ns, self.srtt_ns + 4 * self.rttvar_ns))

"""A raw client for garbage tests: send bytes, half-close, and read whatever comes back."""

import contextlib
import socket
import time

from tidings.core.wire.frames import FrameDecoder


def exchange(address: str, data: bytes, timeout: float = 5.0) -> bytes:
    """Send `data`, half-close, and read until the broker closes (within `timeout` seconds)."""
    host, port = address.split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the broker may already have closed on us
        out = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                return out
            out += chunk
    raise AssertionError("the broker neither answered nor closed the connection in time")


def converse(address: str, data: bytes, answered, timeout: float = 5.0) -> tuple[list[bytes], bool]:
    """Send `data` without closing, then read frames until `answered(bodies)` holds or the broker
    closes: (the bodies read, whether it closed). AssertionError when neither comes in `timeout`
    seconds: the broker left the connection hanging."""
    host, port = address.split(":")
    decoder = FrameDecoder(1 << 24)
    bodies: list[bytes] = []
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        with contextlib.suppress(OSError):  # the broker may already have closed on us
            s.sendall(data)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                break
            except ConnectionResetError:
                return bodies, True
            if not chunk:
                return bodies, True
            bodies += decoder.feed(chunk)
            if answered(bodies):
                return bodies, False
    raise AssertionError(f"the broker neither answered nor closed the connection within {timeout} s")

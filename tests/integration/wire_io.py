"""A raw client for garbage tests: send bytes, half-close, and read whatever comes back."""

import socket
import time


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

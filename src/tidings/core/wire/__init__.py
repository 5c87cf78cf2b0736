"""The tidings wire protocol: length-prefixed msgpack frames (see docs/protocol.md)."""

"""MQTT 3.1.1 and 5.0, sans-IO: the packets (packets.py, properties.py, reason_codes.py), the codec
(codec.py's incremental decoder, encode.py) and the per-connection protocol machine (protocol.py).
docs/mqtt.md says what each version supports and how malformed packets are answered."""

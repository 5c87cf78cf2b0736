"""MQTT 3.1.1 and 5.0, sans-IO (docs/mqtt.md says what each version supports and how malformed
packets are answered).

The wire: `packet_type.py` (levels, packet types), `packets.py` (the 15 packets as frozen values),
`properties.py` (every 5.0 property and `Properties`), `reason_codes.py` (every code, per packet, and
3.1.1's), `fields.py` (the data representations), `decode.py` and `codec.py` (`PacketDecoder`: bytes
in, packets or one `Refusal` out, refusal.py), `encode.py` (`encode(packet, version)`).

One connection's protocol: `protocol.py` (`MqttConnection`: bytes in, the typed effects of
`effects.py` out; the broker side answers through its methods), with `limits.py` (`ProtocolLimits`,
the CONNECT's and PUBLISH's checks, our CONNACK), `inflight.py` (packet identifiers, the QoS 1/2
states both ways and the Receive Maximum windows), `delivery.py` (what we send within the client's
limits, deliveries through their flows) and `aliases.py` (Topic Aliases both ways).
"""

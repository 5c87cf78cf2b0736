# The compiled read of core/mqtt/codec.py's take_publishes (_publishes.c): its one function's signature.
from tidings.core.mqtt.decode import PublishFields
from tidings.core.mqtt.properties import Properties

def take(buf: bytes | bytearray, pos: int, packet_bytes_max: int, version: int, no_properties: Properties, /,
         ) -> tuple[list[PublishFields], int]: ...

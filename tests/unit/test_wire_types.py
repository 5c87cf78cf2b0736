"""The one registry of message types (core/wire/types.py): numbers unique, each inside its layer's
range, the layers apart, and the wire docs (protocol.md, durable.md) name every number as the registry does."""

import re
from pathlib import Path

from tidings.core.wire.types import LAYERS, REGISTRY, Layer

ROOT = Path(__file__).resolve().parents[2]
NUMBERED = re.compile(r"(?<![\d/])(\d{1,3}) ([A-Z][A-Z_]+)\b(?!/)")


def test_every_number_is_unique_and_inside_its_layer():
    numbers = [number for _, _, number in REGISTRY]
    assert len(numbers) == len(set(numbers))
    for span, kind in LAYERS:
        owned = [number for name, _, number in REGISTRY if name == kind.__name__]
        assert owned and all(number in span for number in owned), kind.__name__


def test_the_layers_do_not_overlap_and_the_link_is_inside_the_broker_range():
    ranges = [Layer.CLIENT, Layer.OVERLAY, Layer.MULTICAST, Layer.BROKER, Layer.RELIABILITY]
    for k, one in enumerate(ranges):
        for other in ranges[k + 1:]:
            assert not set(one) & set(other)
    assert set(Layer.LINK) <= set(Layer.BROKER)


def test_the_numbers_in_the_docs_are_the_registry_s():
    known = {(name, number) for _, name, number in REGISTRY}
    names = {name for _, name, _ in REGISTRY}
    documented = set()
    for doc in (ROOT / "docs" / "protocol.md", ROOT / "docs" / "durable.md"):
        for number, name in NUMBERED.findall(doc.read_text()):
            if name in names:
                assert (name, int(number)) in known, f"{doc.name}: {number} {name}"
                documented.add((name, int(number)))
    assert documented == known, f"not in the docs: {sorted(known - documented)}"

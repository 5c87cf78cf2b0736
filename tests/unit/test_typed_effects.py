"""No list[Any] between machines (issue 20): what machines hand each other is typed.

A decoded msgpack message is a list of Any only inside the decoder that checks it and builds a typed
message (core/wire/packable.py says why). The modules below are typed throughout: there, a
`list[Any]` annotation may stand only in one of their decoders. Elsewhere under core/ the count may
only fall (the machines not typed yet: the broker, the session, the links).
"""

import ast
from pathlib import Path

import tidings.core

CORE = Path(tidings.core.__file__).parent
ANY_LIST = "list[Any]"

# module -> the decoders in it that take a decoded message's fields as msgpack gave them
TYPED: dict[str, set[str]] = {
    "overlay/envelope.py": set(),
    "overlay/messages.py": {"_decode_route"},
    "overlay/node.py": set(),
    "overlay/node_id.py": set(),
    "multicast/access.py": set(),
    "multicast/agent.py": set(),
    "multicast/effects.py": set(),
    "multicast/messages.py": {"_DECODERS"},
    "multicast/table.py": set(),
    "reliability/effects.py": set(),
    "reliability/interest.py": set(),
    "reliability/messages.py": {"_list", "_knowledge", "_summary", "_ack", "_nack", "_DECODERS"},
    "reliability/node.py": set(),
    "reliability/source.py": set(),
    "reliability/source_knowledge.py": set(),
    "reliability/tree_streams.py": set(),
    "durable/constream.py": set(),
    "publish/dedup.py": set(),
    "publish/intake.py": set(),
    "auth/guard.py": set(),
    "subscription/table.py": set(),
    "event.py": {"_routing_fields", "_columns"},  # (a peer's records decoded as a batch: records_routing_fields)
    "wire/decoders.py": {"_unpack", "_arity", "_decode_subscribe", "_decode_read"},
    "wire/messages.py": set(),
    "wire/packable.py": set(),
    "wire/peer.py": set(),
    "wire/typed.py": set(),
}
# list[Any] annotations elsewhere under core/, at this commit: lower it as machines get typed
ELSEWHERE_MAX = 8


def any_lists(path: Path) -> list[tuple[int, str]]:
    """(line, enclosing top-level name) of each annotation that holds list[Any]."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []

    def annotations(node: ast.AST) -> list[ast.expr]:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs, node.args.vararg, node.args.kwarg]
            return [a.annotation for a in args if a is not None and a.annotation is not None] + (
                [node.returns] if node.returns is not None else [])
        if isinstance(node, ast.AnnAssign):
            return [node.annotation, *([node.value] if node.value is not None else [])]
        if isinstance(node, ast.Assign):
            return [node.value]
        return []

    for top in tree.body:
        name = getattr(top, "name", None) or (
            ast.unparse(top.targets[0]) if isinstance(top, ast.Assign)
            else ast.unparse(top.target) if isinstance(top, ast.AnnAssign) else "")
        for node in ast.walk(top):
            for annotation in annotations(node):
                if ANY_LIST in ast.unparse(annotation):
                    found.append((annotation.lineno, name))
    return found


def test_typed_modules_hold_list_any_only_in_their_decoders():
    present = {module: decoders for module, decoders in TYPED.items() if (CORE / module).exists()}
    assert len(present) >= len(TYPED) - 3, "the typed modules moved: name them here again"
    outside = {f"{module}:{line} ({name})" for module, decoders in present.items()
               for line, name in any_lists(CORE / module) if name not in decoders}
    assert outside == set()


def test_list_any_elsewhere_in_core_only_falls():
    count = sum(len(any_lists(path)) for path in CORE.rglob("*.py") if str(path.relative_to(CORE)) not in TYPED)
    assert count <= ELSEWHERE_MAX, f"{count} list[Any] annotations under core/ outside the typed modules"


def test_the_scan_finds_an_annotation_in_and_outside_a_decoder(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from typing import Any\n\ndef decode(f: list[Any]) -> int:\n    return 0\n\n"
                      "class Effect:\n    event: list[Any]\n\nTABLE: dict[int, list[Any]] = {}\n")
    assert any_lists(module) == [(3, "decode"), (7, "Effect"), (9, "TABLE")]

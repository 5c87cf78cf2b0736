"""`tidings status` for a terminal: the broker's counters, then its overlay, peers and trees."""

from __future__ import annotations

from typing import Any


def render_status(status: dict[str, Any]) -> str:
    """The broker's status for a terminal: its counters, then the overlay, peer and tree sections."""
    sections = {k: status[k] for k in ("overlay", "peers", "trees", "auth") if k in status}
    flat = {k: v for k, v in status.items() if k not in sections}
    width = max((len(k) for k in flat), default=0)
    lines = [f"{key:<{width}}  {value}" for key, value in flat.items()]
    if "overlay" in sections:
        lines += _overlay_lines(sections["overlay"])
    if "peers" in sections:
        lines += _table(f"peers ({len(sections['peers'])})",
                        ["address", "node", "state", "rtt ms", "queued bytes", "sent", "received"],
                        [[p["address"], _short(p.get("node_id")), p["state"], p.get("rtt_ms"),
                          p.get("queued_bytes"), p.get("sent"), p.get("received")] for p in sections["peers"]])
    if "trees" in sections:
        lines += _table(f"trees ({len(sections['trees'])})", ["tree", "key", "role", "parent", "children"],
                        [[t["name"], _short(t.get("key")), t.get("role"), t.get("parent"),
                          ", ".join(t.get("children") or []) or "-"] for t in sections["trees"]])
    if "auth" in sections:
        lines += _auth_lines(sections["auth"])
    return "\n".join(lines) + "\n"


def _auth_lines(auth: dict[str, Any]) -> list[str]:
    """Who is connected and what was refused (core/auth/guard.py)."""
    identities = auth.get("identities") or {}
    summary = (f"anonymous clients {'allowed' if auth.get('anonymous_allowed') else 'refused'}, "
               f"{auth.get('identities_known', 0)} identities known, {auth.get('rules', 0)} rules, "
               f"{auth.get('refusals', 0)} refusals")
    return ["", "auth", f"  {summary}", *_table("identities", ["identity", "connections", "refusals"],
                                                 [[name, i.get("connections"), i.get("refusals")]
                                                  for name, i in identities.items()])[1:]]


def _short(node_id: Any) -> str:
    return node_id[:8] if isinstance(node_id, str) else "-"


def _overlay_lines(overlay: dict[str, Any]) -> list[str]:
    leaf_set = overlay.get("leaf_set") or []
    neighbours = overlay.get("neighbours") or []
    fill = overlay.get("routing_table_fill") or []
    rows = [
        ("node id", overlay.get("node_id")),
        ("address", overlay.get("address")),
        ("joined", overlay.get("joined")),
        (f"leaf set ({len(leaf_set)})", "  ".join(f"{_short(n[0])}@{n[1]}" for n in leaf_set) or "-"),
        ("routing table", f"{sum(fill)} entries" + "".join(f", row {i}: {n}" for i, n in enumerate(fill) if n)),
        (f"neighbours ({len(neighbours)})",
         "  ".join(f"{_short(n[0])}@{n[1]} {n[2]:.2f} ms" for n in neighbours) or "-"),
    ]
    rows += [(k.replace("_", " "), v) for k, v in overlay.items()
             if k not in ("node_id", "address", "joined", "leaf_set", "routing_table_fill", "neighbours")]
    width = max(len(k) for k, _ in rows)
    return ["", "overlay", *(f"  {k:<{width}}  {v}" for k, v in rows)]


def _table(title: str, header: list[str], rows: list[list[Any]]) -> list[str]:
    if not rows:
        return ["", title, "  (none)"]
    cells = [header, *[["-" if v is None else str(v) for v in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return ["", title, *("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                         for r in cells)]

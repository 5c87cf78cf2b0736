"""Identity and service names: one rule for what a name may be, two keys for when two read alike.

A name is what a subscriber reads as an event's source: an identity in the auth file, and the
service every client claims in its HELLO (an authenticated client's service is its identity). So
that no one can write a name that reads as another's, a name is 1 to NAME_CHARS_MAX ASCII letters,
digits, `_`, `.` or `-`, everywhere (auth file, `tidings auth add`, HELLO, with or without auth):

- no whitespace, control or invisible code point (a trailing space, U+200B ZERO WIDTH SPACE, a
  BOM) can hide in it;
- no letter of another script can stand in for a Latin one (U+043E CYRILLIC SMALL LETTER O for
  `o`). NFKC does not remove those (they are distinct letters, not compatibility forms), and
  Unicode TR39's full confusable data is large and changes with Unicode versions; a name that can
  hold only ASCII cannot be written with them at all. Names are identifiers chosen by operators
  and programs, not prose, so ASCII costs nothing real.

Names are kept as typed (a name that passes the rule needs no rewriting) and compared by two keys
(`name_keys`): the name NFKC-normalised and case-folded, and its skeleton: the look-alikes within
ASCII that TR39's confusables list for these characters replaced (`I` and `1` by `l`, `0` by `o`;
`rn` by `m`, `vv` by `w`, `cl` by `d`), then case-folded. Two names read alike when either key is
equal: `LoadMon` (case), `Ioadmon` and `l0adrnon` (look-alikes) all read as `loadmon`. Two keys,
not one: the skeleton reads a capital `I` as `l` but leaves a small `i` alone, so `MAIL` reads as
`mail` by the first key only. Two identities of one auth file may not read alike, and an anonymous
client may not claim a service that reads as an identity or as `anonymous` (`NameIndex`). The keys
are only ever compared, never shown or stored.
"""

from __future__ import annotations

import unicodedata

from tidings.core.errors import BAD_NAME, TidingsError

NAME_CHARS_MAX = 64
NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
NAME_RULE = f"1 to {NAME_CHARS_MAX} ASCII letters, digits, '_', '.' or '-'"
ANONYMOUS = "anonymous"  # the identity of clients that do not authenticate: no one's name
BROKER_OWN = "@broker"  # a broker's own connection acting for no client (MQTT's retained feed): not a valid name

_LOOKALIKE_CHARS = str.maketrans({"I": "l", "1": "l", "0": "o"})  # before case-folding: `i` is not `l`
_LOOKALIKE_PAIRS = (("rn", "m"), ("vv", "w"), ("cl", "d"))  # their replacements form no new pair
_KINDS = {"Cc": "a control character", "Cf": "an invisible format character", "Zs": "whitespace",
          "Zl": "a line separator", "Zp": "a paragraph separator", "Co": "a private-use character",
          "Cn": "an unassigned code point", "Cs": "a surrogate", "Mn": "a combining mark",
          "Mc": "a combining mark", "Me": "a combining mark"}


class NameRuleError(TidingsError, ValueError):
    code = BAD_NAME


def check_name(name: object, what: str = "an identity name") -> str:
    """`name` if it follows the rule, else NameRuleError naming the rule and the first offender."""
    if not isinstance(name, str):
        raise NameRuleError(f"{what} is {NAME_RULE}, not {type(name).__name__}")
    if not 1 <= len(name) <= NAME_CHARS_MAX:
        raise NameRuleError(f"{what} is {NAME_RULE}; {name[:NAME_CHARS_MAX]!r} has {len(name)} characters")
    for at, char in enumerate(name):
        if char not in NAME_CHARS:
            raise NameRuleError(f"{what} is {NAME_RULE} (so that no name can look like another); {name!r} "
                                f"has {_describe(char)} at index {at}")
    return name


def _describe(char: str) -> str:
    code = f"U+{ord(char):04X}"
    category = unicodedata.category(char)
    if char == " ":
        return f"a space ({code})"
    label = unicodedata.name(char, "")
    kind = _KINDS.get(category, "a character outside ASCII" if ord(char) > 0x7F else "a character not allowed")
    return f"{kind} ({code}{' ' + label if label else ''})"


def name_keys(name: str) -> tuple[str, str]:
    """What `name` is compared by: names with an equal key read alike (see the module docstring)."""
    normal = unicodedata.normalize("NFKC", name)
    skeleton = normal.translate(_LOOKALIKE_CHARS).casefold()
    for pair, single in _LOOKALIKE_PAIRS:
        skeleton = skeleton.replace(pair, single)
    return normal.casefold(), skeleton


class NameIndex:
    """Names that no other may read as, `anonymous` always among them."""

    def __init__(self) -> None:
        self._owners: dict[tuple[int, str], str] = {}
        self.add(ANONYMOUS)

    def owner(self, name: str) -> str | None:
        """The name of the index that `name` reads as (perhaps itself), or None."""
        for key in enumerate(name_keys(name)):
            owner = self._owners.get(key)
            if owner is not None:
                return owner
        return None

    def add(self, name: str) -> str | None:
        """Add `name`, unless it reads as one the index has: then that one, and nothing is added."""
        owner = self.owner(name)
        if owner is None:
            for key in enumerate(name_keys(name)):
                self._owners[key] = name
        return owner

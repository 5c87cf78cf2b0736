"""The name rule and the name key (core/auth/names.py): what a service or identity may be called,
and which names an anonymous client may not claim because they read as an identity's."""

import itertools
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.aio.auth_file import add_identity, load_policy
from tidings.core.auth.credentials import KdfParams, make_verifier
from tidings.core.auth.guard import Guard
from tidings.core.auth.handshake import AuthError, Principal
from tidings.core.auth.names import NAME_CHARS, NAME_CHARS_MAX, NameIndex, NameRuleError, check_name, name_keys
from tidings.core.auth.policy import AuthFileError, AuthPolicy, Identity
from tidings.core.auth.rules import AccessRules
from tidings.core.broker.connection import ClientConnection
from tidings.core.effects import Disconnect, Effect, Send
from tidings.core.errors import TidingsError
from tidings.core.wire import decoders, messages
from tidings.core.wire.frames import FrameDecoder

VERIFIER = make_verifier(b"s" * 32, b"salt" * 4, KdfParams(n=1 << 8))
COUNTER = itertools.count()


def nonces(n):
    return next(COUNTER).to_bytes(n, "big")


def guard(*names):
    identities = {name: Identity(name, VERIFIER) for name in names}
    return Guard(AuthPolicy(identities, AccessRules([]), None, True, AuthPolicy.open().anonymous_limits), nonces)


def normalised(text):
    """The issue's normalisation: NFKC, case-folded."""
    return unicodedata.normalize("NFKC", text).casefold()


THE_ISSUES_FIVE = ["LoadMon", "loadmon ", "l\u043eadmon", "load\u200bmon", "anonymous"]


@pytest.mark.parametrize(("claim", "code", "message"), [
    ("LoadMon", "auth-required", "reads as the registered identity 'loadmon'"),
    ("loadmon ", "bad-name", r"a space \(U\+0020\) at index 7"),
    ("l\u043eadmon", "bad-name", r"outside ASCII \(U\+043E CYRILLIC SMALL LETTER O\) at index 1"),
    ("load\u200bmon", "bad-name", r"an invisible format character \(U\+200B ZERO WIDTH SPACE\) at index 4"),
    ("anonymous", "auth-required", "reads as 'anonymous'"),
    ("ANONYMOUS", "auth-required", "reads as 'anonymous'"),
    ("\ufeffloadmon", "bad-name", "U\\+FEFF ZERO WIDTH NO-BREAK SPACE"),
    ("\uff4coadmon", "bad-name", "U\\+FF4C FULLWIDTH LATIN SMALL LETTER L"),  # NFKC would make it ASCII
    ("loadmon\n", "bad-name", "a control character"),
    ("Ioadmon", "auth-required", "'loadmon'"),  # capital i
    ("l0adrnon", "auth-required", "'loadmon'"),  # zero, r n
    ("", "bad-name", "has 0 characters"),
    ("x" * (NAME_CHARS_MAX + 1), "bad-name", "has 65 characters"),
])
def test_look_alikes_of_an_identity_are_refused_with_the_rule(claim, code, message):
    g = guard("loadmon")
    with pytest.raises(TidingsError, match=message) as err:
        g.hello(claim, "i", None)
    assert err.value.code == code
    if code == "bad-name":
        assert "1 to 64 ASCII letters, digits, '_', '.' or '-'" in str(err.value)
    assert g.refusals == 1


def hello_to(conn: ClientConnection, claim: str) -> list[Effect]:
    """What the connection answers a HELLO claiming `claim` (core/broker/connection.py, without a broker)."""
    conn.decoder.push(messages.hello(claim, "i"))
    body = conn.decoder.pull()
    assert body is not None
    return conn.opening(0, body, {})[1]


def test_the_issues_five_end_the_handshake_with_an_error_naming_the_rule():
    g = guard("loadmon")
    for n, claim in enumerate(THE_ISSUES_FIVE):
        conn = ClientConnection(n, 1 << 20, 10**9, g)
        effects = hello_to(conn, claim)
        [reply] = [decoders.decode_broker_message(body) for e in effects if isinstance(e, Send)
                   for body in FrameDecoder(1 << 20).feed(e.data)]
        assert isinstance(reply, messages.Error) and reply.code in ("bad-name", "auth-required")
        assert ("ASCII letters" if reply.code == "bad-name" else "reads as") in reply.message
        assert isinstance(effects[-1], Disconnect) and not conn.service and not conn.authenticated
    conn = ClientConnection(9, 1 << 20, 10**9, g)
    hello_to(conn, "visitor")
    assert conn.service == "visitor" and conn.identity == "anonymous" and not conn.authenticated


def test_names_of_no_one_are_let_in_as_typed():
    g = guard("loadmon")
    for claim in ("loadmon2", "Load.Mon-7", "tidings-cli", "a", "x" * NAME_CHARS_MAX):
        assert g.hello(claim, "i", None) == Principal(claim, "i", "anonymous", authenticated=False)


@given(st.text(max_size=NAME_CHARS_MAX + 2))
def test_any_string_is_refused_or_normalises_to_an_allowed_name(text):
    try:
        kept = check_name(text, "a service name")
    except NameRuleError as exc:
        assert exc.code == "bad-name" and "a service name is 1 to 64" in str(exc)
        assert not text or len(text) > NAME_CHARS_MAX or not set(text) <= NAME_CHARS
        return
    assert kept == text  # kept as typed
    assert check_name(normalised(text)) == text.lower()  # its normal form is an allowed name too
    folded, skeleton = name_keys(text)
    assert name_keys(folded)[0] == folded and name_keys(skeleton)[1] == skeleton  # keys are normal forms
    assert name_keys(text.upper())[0] == folded and name_keys(text.upper().lower())[1] == name_keys(folded)[1]


identity_names = st.text(sorted(NAME_CHARS), min_size=1, max_size=12)
INVISIBLE = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", " ", "\t", "\u00a0", "\u3000"]
CYRILLIC = str.maketrans("aceopxyABCEHKMOPTX", "\u0430\u0441\u0435\u043e\u0440\u0445\u0443\u0410\u0412\u0421"
                         "\u0415\u041d\u041a\u041c\u041e\u0420\u0422\u0425")  # their Cyrillic look-alikes


def _fullwidth(name):
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in name)


@st.composite
def claims(draw, names):
    """What an impostor would claim: a variant of an identity's name, or any text."""
    name = draw(st.sampled_from(names))
    at = draw(st.integers(0, len(name)))
    flips = draw(st.lists(st.booleans(), min_size=len(name), max_size=len(name)))
    variants = {
        "as is": lambda: name,
        "case": lambda: "".join(c.upper() if up else c.lower() for c, up in zip(name, flips, strict=True)),
        "invisible": lambda: name[:at] + draw(st.sampled_from(INVISIBLE)) + name[at:],
        "cyrillic": lambda: name.translate(CYRILLIC),
        "fullwidth": lambda: _fullwidth(name),
        "confusable": lambda: name.replace("l", "I").replace("o", "0").replace("m", "rn"),
        "text": lambda: draw(st.text(max_size=20)),
    }
    return variants[draw(st.sampled_from(sorted(variants)))]()


@given(st.data(), st.lists(identity_names, min_size=1, max_size=5))
def test_no_anonymous_claim_collides_with_an_identity(data, drawn):
    index = NameIndex()
    names = [n for n in drawn if index.add(n) is None]  # as an auth file takes them
    if not names:
        return
    g = guard(*names)
    claim = data.draw(claims(names))
    try:
        principal = g.hello(claim, "i", None)
    except (AuthError, NameRuleError):
        return
    assert isinstance(principal, Principal) and principal.identity == "anonymous"
    assert not principal.authenticated
    assert normalised(claim) not in {normalised(n) for n in [*names, "anonymous"]}
    for key in (0, 1):
        assert name_keys(claim)[key] not in {name_keys(n)[key] for n in [*names, "anonymous"]}


def test_the_auth_file_refuses_identities_that_read_alike_and_applies_rules_by_key():
    entry = {"salt": "c2FsdHNhbHRzYWx0c2FsdA", "stored_key": "AA", "server_key": "AA", "scrypt": [256, 8, 1]}
    for names, message in [(["loadmon", "LoadMon"], "reads as 'loadmon'"), (["Anonymous"], "reserved"),
                           (["anonymous"], "reserved"), (["loadmon", "Ioadmon"], "another identity")]:
        with pytest.raises(AuthFileError, match=message):
            AuthPolicy.from_mapping({"identities": dict.fromkeys(names, entry)})
    with pytest.raises(AuthFileError, match="U\\+200B"):
        AuthPolicy.from_mapping({"identities": {"load\u200bmon": entry}})
    policy = AuthPolicy.from_mapping({"identities": {"loadmon": entry}, "rules": [
        {"identity": "LoadMon", "allow": "publish", "pattern": "load/#"},
        {"identity": "ANONYMOUS", "allow": "subscribe", "pattern": "load/#"}]})
    assert [r.identity for r in policy.rules.rules] == ["loadmon", "anonymous"]
    assert policy.rules.may_publish("loadmon", "load/x") and policy.rules.may_subscribe("anonymous", "load/#")


def test_auth_add_applies_the_same_rule(tmp_path):
    path = tmp_path / "auth.toml"
    kdf = KdfParams(n=1 << 8)
    add_identity(path, "loadmon", [], [], [], kdf)
    add_identity(path, "load.mon-2", [], [], [], kdf)  # a '.' is a name, not a nested TOML table
    for name, message in [("LoadMon", "reads as identity 'loadmon'"), ("loadmon", "already exists"),
                          ("Anonymous", "reserved"), ("loadmon ", "a space"), ("l\u043eadmon", "outside ASCII")]:
        with pytest.raises(TidingsError, match=message):
            add_identity(path, name, [], [], [], kdf)
    assert sorted(load_policy(path).identities) == ["load.mon-2", "loadmon"]

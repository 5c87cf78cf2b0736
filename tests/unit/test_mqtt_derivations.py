"""A password's scrypt off the event loop (core/mqtt/derivations.py): the gateway asks for it as an
effect and answers the CONNECT when the key comes back; a flood is bounded per broker and per source
address (CONNACK 0x9F, 3.1.1: 3); an accepted password is remembered, a wrong one never is."""

from tidings.core.auth.credentials import Credential, KdfParams, b64, make_verifier, salted_key
from tidings.core.auth.guard import Guard
from tidings.core.auth.policy import AuthPolicy, Identity, Limits
from tidings.core.auth.rules import AccessRules
from tidings.core.effects import Disconnect, Send
from tidings.core.inputs import ConnectionLost
from tidings.core.mqtt.derivations import IN_FLIGHT_MAX, PER_SOURCE_MAX, Derivations, KeyDerived

from .test_mqtt_gateway import Gate

KDF = KdfParams(n=1 << 8)
CRED = Credential("sensor", b"s" * 32)
RIGHT, WRONG = b64(CRED.secret).encode(), b64(b"w" * 32).encode()


def gate() -> Gate:
    identity = Identity("sensor", make_verifier(CRED.secret, b"salt" * 4, KDF))
    policy = AuthPolicy({"sensor": identity}, AccessRules([]), None, False, Limits())
    counter = iter(range(1, 1 << 30))
    return Gate(guard=Guard(policy, lambda n: next(counter).to_bytes(n, "big")))


def derive(g: Gate) -> int:
    """Run what the gateway asked for, as the runtime's workers do; how many there were."""
    asks = g.gw.take_derivations()
    for ask in asks:
        g.now += 1
        for eff in g.gw.derived(KeyDerived(g.now, ask.conn, ask.ticket, salted_key(ask.secret, ask.salt, ask.kdf))):
            _apply(g, eff)
    return len(asks)


def _apply(g: Gate, eff: object) -> None:
    if isinstance(eff, Send):
        g.h.sent.setdefault(eff.conn, []).append(eff.data)
    elif isinstance(eff, Disconnect):
        g.closed.add(eff.conn)
    else:
        g.h.apply([eff])


def test_a_password_is_derived_off_the_loop_then_remembered():
    g = gate()
    assert g.connect(1, username="sensor", password=RIGHT) == []  # no CONNACK before the key comes back
    assert derive(g) == 1
    [connack] = g.answers(1)
    assert connack.reason_code == 0
    [connack] = g.connect(2, username="sensor", password=RIGHT, client_id="again")  # the cache: no scrypt
    assert connack.reason_code == 0 and g.gw.take_derivations() == []
    assert g.gw.status()["mqtt"]["derivation_cache_hits"] == 1


def test_a_wrong_password_costs_a_derivation_each_time_and_is_refused():
    g = gate()
    for conn, version, code in ((1, 5, 0x86), (2, 4, 4)):
        assert g.connect(conn, version, username="sensor", password=WRONG) == []
        assert derive(g) == 1
        assert [c.reason_code for c in g.answers(conn)] == [code] and conn in g.closed
    assert g.gw.status()["mqtt"]["derivations_cached"] == 0


def test_derivations_in_flight_are_bounded_per_source_and_per_broker():
    g = gate()
    conn = 0
    for _ in range(PER_SOURCE_MAX):
        conn += 1
        assert g.connect(conn, username="sensor", password=WRONG, source="10.0.0.1") == []
    [refused] = g.connect(conn + 1, username="sensor", password=WRONG, source="10.0.0.1")
    [refused_311] = g.connect(conn + 2, 4, username="sensor", password=WRONG, source="10.0.0.1")
    assert (refused.reason_code, refused_311.reason_code) == (0x9F, 3)  # Connection rate exceeded / unavailable
    conn += 2
    for i in range(IN_FLIGHT_MAX - PER_SOURCE_MAX):  # others' sources, up to the broker's bound
        conn += 1
        assert g.connect(conn, username="sensor", password=WRONG, source=f"10.0.1.{i}") == []
    [refused] = g.connect(conn + 1, username="sensor", password=RIGHT, source="10.0.2.1", client_id="x")
    assert refused.reason_code == 0x9F
    g.feed(ConnectionLost(g.now, 1))  # a connection gone keeps its slot until its derivation ends
    assert len(g.gw.derivations.in_flight) == IN_FLIGHT_MAX
    assert derive(g) == IN_FLIGHT_MAX
    assert g.gw.derivations.in_flight == {} and g.gw.derivations.per_source == {}
    g.connect(conn + 2, username="sensor", password=RIGHT, source="10.0.0.1", client_id="y")
    assert derive(g) == 1 and g.answers(conn + 2)[0].reason_code == 0


def test_the_cache_is_a_bounded_lru_keyed_by_a_hash_of_the_password():
    d = Derivations(b"k" * 32, cache_entries_max=2)
    keys = [d.cache_key("sensor", bytes([i]) * 32, b"salt" * 4, KDF) for i in range(3)]
    assert len(set(keys)) == 3 and all(b"\x00" * 32 not in k for k in keys)
    assert keys[0] != Derivations(b"j" * 32).cache_key("sensor", b"\x00" * 32, b"salt" * 4, KDF)
    d.remember(keys[0], b"a")
    d.remember(keys[1], b"b")
    assert d.cached(keys[0]) == b"a"  # now the most recent
    d.remember(keys[2], b"c")
    assert (d.cached(keys[1]), d.cached(keys[0]), d.cached(keys[2])) == (None, b"a", b"c")


def test_a_failed_derivation_refuses_the_connect():
    g = gate()
    g.connect(1, username="sensor", password=RIGHT)
    [ask] = g.gw.take_derivations()
    for eff in g.gw.derived(KeyDerived(g.now, ask.conn, ask.ticket, None)):
        _apply(g, eff)
    assert [c.reason_code for c in g.answers(1)] == [0x86]

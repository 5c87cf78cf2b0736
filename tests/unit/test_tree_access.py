"""A tree's access list (multicast/access.py) and how Scribe keeps it: the list decides exactly as
the creator's rules would for every pattern of the tree; the rendez-vous point and every node it
reached refuse a SUBSCRIBE whose members the list admits none of; the list goes down the tree; only
the first creator changes it; and a broker applies it to its clients' subscriptions."""

import contextlib
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.auth.guard import Guard
from tidings.core.auth.policy import AuthPolicy, Limits
from tidings.core.auth.rules import ANY_IDENTITY, PUBLISH, SUBSCRIBE, AccessRules, Rule
from tidings.core.broker.cluster import ClusterMember
from tidings.core.errors import TidingsError
from tidings.core.multicast import messages as m
from tidings.core.multicast.access import ACL_ENTRIES_MAX, MEMBERS_PER_SUBSCRIBE_MAX, AclTooLarge, acl_for, admits
from tidings.core.multicast.agent import ScribeAgent, ScribeConfig
from tidings.core.multicast.effects import AccessChanged, ParentSuspected
from tidings.core.multicast.trees import subscription_tree, tree_key
from tidings.core.overlay.envelope import Deliver, Forward, PeerSend, RouteMessage, RouteTo
from tidings.core.overlay.node import OverlayConfig
from tidings.core.overlay.node_id import id_to_wire
from tidings.core.wire import messages
from tidings.core.wire.types import ScribeType

from .core_harness import Harness, of_type
from .scribe_harness import SECOND, Network, node
from .test_access_rules import patterns

ME = node("me")
A, B, C = node("a"), node("b"), node("c")
TREE = "t/#"
KEY = tree_key(TREE)
OWNER_ONLY = (Rule("owner", SUBSCRIBE, True, "t/#"),)
META = m.TreeMetadata("owner", OWNER_ONLY, A.address)


def routed(message, source=A):
    return RouteMessage(KEY, source, 1, m.decode(message.to_wire()).to_wire())


def deliver(agent, message, source=A):
    return agent.on_deliver(0, Deliver(routed(message, source)))


def forward(agent, message, source=A):
    return agent.on_forward(0, Forward(routed(message, source), ME))


def sends(effects, kind=None):
    return [(e.address, m.decode(e.message)) for e in effects
            if type(e) is PeerSend and (kind is None or e.message[0] == kind)]


def root_with(metadata=META) -> ScribeAgent:
    agent = ScribeAgent(ME)
    deliver(agent, m.Create(TREE, metadata))
    return agent


# ---- the list ---------------------------------------------------------------------------------------

rules = st.lists(st.builds(Rule, st.sampled_from(["alice", "bob", ANY_IDENTITY]),
                           st.sampled_from([PUBLISH, SUBSCRIBE]), st.booleans(), patterns()), min_size=1, max_size=6)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(rules, patterns(), st.sampled_from(["alice", "bob", "carol"]))
def test_the_list_decides_as_the_creators_rules_for_every_pattern_of_the_tree(rule_list, pattern, identity):
    tree = subscription_tree(pattern)
    access = AccessRules(rule_list)
    acl = acl_for(access, tree)
    assert acl is not None and all(r.action == SUBSCRIBE for r in acl)
    assert admits(acl, identity, pattern) == access.may_subscribe(identity, pattern)


def test_no_rules_is_an_open_tree_and_an_empty_list_admits_nobody():
    assert acl_for(AccessRules([]), TREE) is None and admits(None, "anyone", "t/x")
    acl = acl_for(AccessRules([Rule("owner", SUBSCRIBE, True, "elsewhere/#")]), TREE)
    assert acl == () and not admits(acl, "owner", "t/x")


def test_a_creator_with_too_many_rules_on_a_tree_makes_no_list():
    many = AccessRules([Rule(f"i{n}", SUBSCRIBE, True, "t/#") for n in range(ACL_ENTRIES_MAX + 1)])
    try:
        acl_for(many, TREE)
    except AclTooLarge:
        return
    raise AssertionError("a list past its bound was made")


# ---- the rendez-vous point and the nodes it reached ----------------------------------------------------

def test_the_root_refuses_a_subscribe_whose_members_it_admits_none_of():
    agent = root_with()
    effects = deliver(agent, m.ScribeSubscribe(TREE, B, None, (("x", "t/#"), ("x", "t/+/a"))))
    assert sends(effects) == [(B.address, m.Access(TREE, META))]
    assert agent.children(TREE) == []


def test_the_root_adopts_a_subscribe_it_admits_one_member_of_and_sends_the_list_after_the_heartbeat():
    agent = root_with()
    effects = deliver(agent, m.ScribeSubscribe(TREE, B, None, (("x", "t/#"), ("owner", "t/a"))))
    assert sends(effects) == [(B.address, m.Heartbeat((TREE,))), (B.address, m.Access(TREE, META))]
    assert agent.children(TREE) == [B.address]


def test_a_subscribe_naming_no_member_is_a_forwarders_and_is_adopted():
    agent = root_with()
    deliver(agent, m.ScribeSubscribe(TREE, B))
    assert agent.children(TREE) == [B.address]


def test_a_child_that_asks_again_for_excluded_members_only_is_dropped():
    agent = root_with()
    deliver(agent, m.ScribeSubscribe(TREE, B))
    effects = deliver(agent, m.ScribeSubscribe(TREE, B, None, (("x", "t/#"),)))
    assert sends(effects) == [(B.address, m.Access(TREE, META))] and agent.children(TREE) == []


def test_an_open_tree_refuses_nobody():
    agent = root_with(m.TreeMetadata("owner", None, A.address))
    deliver(agent, m.ScribeSubscribe(TREE, B, None, (("x", "t/#"),)))
    assert agent.children(TREE) == [B.address]


def test_only_the_first_creator_changes_the_list_and_a_change_goes_down_the_tree():
    agent = root_with()
    deliver(agent, m.ScribeSubscribe(TREE, B))
    looser = m.TreeMetadata("other", (Rule("x", SUBSCRIBE, True, "#"),), C.address)
    assert sends(deliver(agent, m.Create(TREE, looser), source=C), ScribeType.ACCESS) == []
    assert agent.admits(TREE, "x", "t/#") is False and agent.creator(TREE) == "owner"
    wider = m.TreeMetadata("owner", (*OWNER_ONLY, Rule("x", SUBSCRIBE, True, "t/#")), A.address)
    effects = deliver(agent, m.Create(TREE, wider))
    assert AccessChanged(TREE, wider) in effects
    assert sends(effects, ScribeType.ACCESS) == [(B.address, m.Access(TREE, wider))]
    assert agent.admits(TREE, "x", "t/#") is True


def test_an_identity_may_read_everything_only_where_every_list_admits_it_to_its_whole_tree():
    """What lets a broker send a READ the log's own bytes (SPAN), which hold every channel."""
    agent = root_with()
    assert agent.admits_everywhere("owner") and not agent.admits_everywhere("x")
    deliver(agent, m.Create(TREE, m.TreeMetadata("owner", (*OWNER_ONLY, Rule("x", SUBSCRIBE, True, "t/a")),
                                                  A.address)))
    assert not agent.admits_everywhere("x"), "t/a is not the whole tree t/#"
    deliver(agent, m.Create(TREE, m.TreeMetadata("owner", (*OWNER_ONLY, Rule("x", SUBSCRIBE, True, "t/#")),
                                                  A.address)))
    assert agent.admits_everywhere("x") and ScribeAgent(ME).admits_everywhere("anyone")


def test_a_member_keeps_the_list_from_its_parent_and_passes_it_to_its_children():
    agent = ScribeAgent(ME)
    agent.subscribe(0, TREE, None, (("owner", "t/#"),))
    agent.handle(0, B, m.Heartbeat((TREE,)).to_wire())
    forward(agent, m.ScribeSubscribe(TREE, C))
    assert agent.admits(TREE, "x", "t/#") is None, "no list reached it yet"
    effects = agent.handle(0, B, m.Access(TREE, META).to_wire())
    assert effects[0] == AccessChanged(TREE, META, refused=False)
    assert sends(effects) == [(C.address, m.Access(TREE, META))]
    assert agent.admits(TREE, "x", "t/#") is False and agent.admits(TREE, "owner", "t/a") is True
    assert agent.handle(0, A, m.Access(TREE, m.TreeMetadata("forged", None)).to_wire()) == [], \
        "only the parent's list counts once there is one"
    adopted = forward(agent, m.ScribeSubscribe(TREE, A))[0]
    assert sends(adopted) == [(A.address, m.Heartbeat((TREE,))), (A.address, m.Access(TREE, META))]


def test_a_refused_node_joins_again_for_what_the_list_admits():
    agent = ScribeAgent(ME)
    agent.subscribe(0, TREE, None, (("x", "t/#"), ("owner", "t/a")))
    effects = agent.handle(0, B, m.Access(TREE, META).to_wire())
    assert effects[0] == AccessChanged(TREE, META, refused=True)
    (suspected, route) = effects[1:]
    assert type(suspected) is ParentSuspected and type(route) is RouteTo
    assert m.decode(route.payload).members == (("owner", "t/a"),)


def test_a_refused_node_with_nothing_admitted_waits_for_its_broker_to_leave():
    agent = ScribeAgent(ME)
    agent.subscribe(0, TREE, None, (("x", "t/#"),))
    assert agent.handle(0, B, m.Access(TREE, META).to_wire()) == [AccessChanged(TREE, META, refused=True)]
    assert agent.unsubscribe(0, TREE) == [] and agent.status() == []


# ---- across a network of agents -------------------------------------------------------------------

def test_across_forwarders_an_excluded_member_is_served_nothing_and_a_wider_list_lets_it_in():
    """The far node's SUBSCRIBE makes new forwarders on its way; the first node holding the list
    refuses theirs, the list comes back down to the far node (whose broker then ends x's
    subscription: here, `unsubscribe`), and the branch prunes itself."""
    net = Network(32)
    creator = "n1:7000"
    net.do(creator, lambda agent, now: agent.create(now, TREE, "owner", OWNER_ONLY))
    net.do(creator, lambda agent, now: agent.subscribe(now, TREE, None, (("owner", "t/#"),)))
    root = net.root_of(KEY).address
    far = max((a for a in net.alive if a not in (root, creator)),
              key=lambda a: bin(net.alive[a].node_id ^ KEY).count("1"))  # most bits to fix: several hops
    net.do(far, lambda agent, now: agent.subscribe(now, TREE, None, (("x", "t/#"),)))
    told = [eff.metadata for at, eff in net.upcalls_of(AccessChanged) if at == far]
    assert told and all(md == m.TreeMetadata("owner", OWNER_ONLY, creator) for md in told)
    assert net.agents[far].admits(TREE, "x", "t/#") is False
    net.do(far, lambda agent, now: agent.unsubscribe(now, TREE))
    net.advance(5 * SECOND)
    assert all(far not in entry["children"] for entry in net.tree_status(TREE).values())
    assert far not in net.tree_status(TREE)
    net.publish("n5:7000", TREE, ["secret"])
    assert far not in net.received(TREE) and creator in net.received(TREE)
    wider = (*OWNER_ONLY, Rule("x", SUBSCRIBE, True, "t/#"))
    net.do(creator, lambda agent, now: agent.create(now, TREE, "owner", wider))
    net.do(far, lambda agent, now: agent.subscribe(now, TREE, None, (("x", "t/#"),)))
    net.publish("n5:7000", TREE, ["now"])
    assert net.received(TREE)[far] == [["now"]]
    assert net.agents[far].admits(TREE, "x", "t/#") is True


# ---- the broker ------------------------------------------------------------------------------------

def anonymous_with(*patterns_allowed: str) -> AuthPolicy:
    return AuthPolicy({}, AccessRules([Rule("anonymous", SUBSCRIBE, True, p) for p in patterns_allowed]),
                      None, True, Limits())


def test_a_reload_at_the_creator_ends_the_subscriptions_its_new_list_excludes():
    """A lone broker is the rendez-vous point of every tree and their creator: after a reload its
    CREATE changes the list, and the subscription the list now excludes gets `forbidden` and ends
    (the guard alone checks only new subscriptions); one it still admits goes on."""
    h = Harness(guard=Guard(anonymous_with("t/#"), lambda n: b"n" * n))
    h.apply(h.broker.start_overlay(0, "127.0.0.1:7400", None, random.Random(1)))
    h.connect(1)
    wide, narrow = h.subscribe(1, "t/#"), h.subscribe(1, "t/+/x")
    h.inbox(1)
    assert h.broker.status()["trees"][0]["creator"] == "anonymous"
    h.apply(h.broker.reload_auth(1, anonymous_with("t/+/x")))
    (error,) = of_type(h.inbox(1), messages.Error)
    assert (error.code, error.context.get("sub")) == ("forbidden", wide)
    assert "access list of tree 't/#'" in error.message
    assert [s["sub"] for c in h.broker.status()["connections"] for s in c["subscriptions"]] == [narrow]
    again = h.subscribe(1, "t/#")
    assert of_type(h.inbox(1), messages.Error) == []  # a second forbidden within the refusal window waits
    h.run_until(2 * h.broker.config.refusal_window_ns)
    (error,) = of_type(h.inbox(1), messages.Error)
    assert (error.code, error.context.get("sub"), error.context.get("subs")) == ("forbidden", again, [again])


def test_without_rules_a_broker_creates_nothing_and_every_tree_stays_open():
    h = Harness()
    h.apply(h.broker.start_overlay(0, "127.0.0.1:7400", None, random.Random(1)))
    h.connect(1)
    h.subscribe(1, "t/#")
    assert of_type(h.inbox(1), messages.Error) == []
    (tree,) = h.broker.status()["trees"]
    assert tree["creator"] is None and tree["acl_rules"] is None
    assert h.broker.cluster.scribe.created() == []


def test_a_broker_names_in_its_subscribe_only_the_members_that_still_stand():
    """The pairs a broker's SUBSCRIBE names (at most MEMBERS_PER_SUBSCRIBE_MAX) are its standing
    subscriptions': one that ended is no longer named, and a pair beyond the bound takes its place
    (else the bound fills with ended ones, and a root whose list admits none of them refuses the
    branch)."""
    h = Harness()
    h.apply(h.broker.start_overlay(0, "127.0.0.1:7400", None, random.Random(1)))
    h.connect(1)
    subs = [h.subscribe(1, f"t/+/p{i}") for i in range(MEMBERS_PER_SUBSCRIBE_MAX + 1)]
    h.subscribe(1, "t/+/p1")  # a second subscription for one pair
    h.inbox(1)
    named = h.broker.cluster.scribe.members
    assert len(named(TREE)) == MEMBERS_PER_SUBSCRIBE_MAX and ("anonymous", "t/+/p64") not in named(TREE)
    for sub in subs[:2]:
        h.send(1, h.sessions[1].unsubscribe(sub))
    assert of_type(h.inbox(1), messages.Error) == []
    assert ("anonymous", "t/+/p0") not in named(TREE) and ("anonymous", "t/+/p1") in named(TREE)
    assert named(TREE)[-1] == ("anonymous", "t/+/p64") and len(named(TREE)) == MEMBERS_PER_SUBSCRIBE_MAX


# ---- untrusted peers ----------------------------------------------------------------------------

NEAR_PATTERNS = st.sampled_from(["t/#", "t/+/x", "#", "a/#/b", "", "t/a+", 5, None])
rule_items = st.lists(st.one_of(st.tuples(st.sampled_from(["x", "*", "", 3]), st.sampled_from([True, False, 1, None]),
                                          NEAR_PATTERNS).map(list), st.just("x"), st.just([])), max_size=4)
acls = st.one_of(st.none(), rule_items, st.just([["x", True, "t/#"]] * (ACL_ENTRIES_MAX + 1)), st.text(max_size=3))
members = st.one_of(st.lists(st.tuples(st.sampled_from(["x", "", "y" * 400]), NEAR_PATTERNS).map(list), max_size=3),
                    st.just([["x", "t/#"]] * 65), st.none())
brokers = st.sampled_from(["", "127.0.0.1:9", None, "b" * 400])
shaped = st.one_of(
    st.tuples(acls, brokers).map(lambda t: [ScribeType.ACCESS, TREE, "owner", t[0], t[1]]),
    st.tuples(acls, brokers).map(lambda t: [ScribeType.REPLICA, TREE, "owner", t[0], t[1]]),
    st.tuples(acls, brokers).map(lambda t: [64, id_to_wire(KEY), [id_to_wire(9), "127.0.0.1:9"], 1,
                                            [ScribeType.CREATE, TREE, "owner", t[0], t[1]]]),
    members.map(lambda ms: [64, id_to_wire(KEY), [id_to_wire(9), "127.0.0.1:9"], 1,
                            [ScribeType.SUBSCRIBE, TREE, [id_to_wire(9), "127.0.0.1:9"], None, ms]]),
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(batch=st.lists(shaped, min_size=1, max_size=6))
def test_malformed_lists_and_members_from_peers_are_errors_to_them_and_the_tree_goes_on(batch):
    """Whatever a peer puts in an access list or a member list, the composer handles it or raises a
    TidingsError (a bad-message to that peer); the node's own subscription is still decided."""
    member = ClusterMember(ME, OverlayConfig(), ScribeConfig(), random.Random(1))
    member.start(0, None)
    member.subscribe(0, TREE, (("owner", "t/#"),))
    for message in batch:
        with contextlib.suppress(TidingsError):
            member.received(1, "127.0.0.1:9", message)
    assert member.scribe.admits(TREE, "owner", "t/#") in (True, False, None)
    assert len(member.scribe.status()) == 1

"""Access rules against a brute-force reference: every decision equals the one found by
enumerating channels over a universe that is exact for the patterns involved (their literal
segments, one fresh segment and one fresh `$` segment, up to one segment longer than the longest
pattern: longer channels behave as those do)."""

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.auth.rules import ANY_IDENTITY, PUBLISH, SUBSCRIBE, AccessRules, Rule, covered, intersects
from tidings.core.channels import pattern_matches

LITERALS = ["a", "b", "$s", ""]
segment = st.sampled_from([*LITERALS, "+"])


@st.composite
def patterns(draw):
    segs = draw(st.lists(segment, min_size=1, max_size=2))
    if draw(st.booleans()):
        segs.append("#")
    pattern = "/".join(segs)
    return pattern if pattern else "a"


def universe(pats):
    literals = {s for p in pats for s in p.split("/") if s not in ("+", "#")} | {"fresh", "$fresh"}
    depth = max(len(p.split("/")) for p in pats) + 1
    out = []
    for n in range(1, depth + 1):
        out += ["/".join(c) for c in itertools.product(sorted(literals), repeat=n)]
    return [c for c in out if c]  # a channel is never empty


def matched(pattern, chans):
    return {c for c in chans if pattern_matches(pattern, c)}


@settings(max_examples=300, deadline=None, derandomize=True)
@given(patterns(), patterns())
def test_intersects_matches_enumeration(a, b):
    chans = universe([a, b])
    assert intersects(a, b) == bool(matched(a, chans) & matched(b, chans))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(patterns(), st.lists(patterns(), max_size=3))
def test_covered_matches_enumeration(p, allows):
    chans = universe([p, *allows])
    union = set().union(*(matched(a, chans) for a in allows)) if allows else set()
    assert covered(p, allows) == (matched(p, chans) <= union)


rules = st.lists(st.builds(Rule, st.sampled_from(["alice", "bob", ANY_IDENTITY]),
                           st.sampled_from([PUBLISH, SUBSCRIBE]), st.booleans(), patterns()), max_size=5)


def reference_allows(rule_list, identity, action, pattern, chans):
    """Every channel the target can match is allowed: some allow matches it, no deny does."""
    if not rule_list:
        return True
    mine = [r for r in rule_list if r.action == action and r.identity in (identity, ANY_IDENTITY)]
    for c in matched(pattern, chans):
        if any(not r.allow and pattern_matches(r.pattern, c) for r in mine):
            return False
        if not any(r.allow and pattern_matches(r.pattern, c) for r in mine):
            return False
    return True


@settings(max_examples=300, deadline=None, derandomize=True)
@given(rules, st.sampled_from(["alice", "bob", "carol"]), patterns())
def test_decisions_match_the_reference(rule_list, identity, target):
    access = AccessRules(rule_list)
    chans = universe([target, *(r.pattern for r in rule_list)])
    assert access.may_subscribe(identity, target) == reference_allows(rule_list, identity, SUBSCRIBE, target, chans)
    for c in sorted(matched(target, chans))[:20]:
        assert access.may_publish(identity, c) == reference_allows(rule_list, identity, PUBLISH, c, chans)
    assert access.may_subscribe(identity, target) == access.may_subscribe(identity, target)  # cached


def test_deny_wins_and_no_rules_means_open():
    access = AccessRules([Rule("alice", SUBSCRIBE, True, "#"), Rule("alice", SUBSCRIBE, False, "secret/#"),
                          Rule(ANY_IDENTITY, PUBLISH, True, "load/+")])
    assert access.may_subscribe("alice", "load/#")
    assert not access.may_subscribe("alice", "#")  # could deliver secret/x
    assert not access.may_subscribe("alice", "secret/x")
    assert access.may_publish("bob", "load/h1") and not access.may_publish("bob", "load/h1/x")
    assert not access.may_subscribe("bob", "load/#")
    assert AccessRules([]).may_publish("anyone", "x")

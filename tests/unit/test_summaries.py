

def test_a_summary_holding_the_trees_own_pattern_without_a_filter_is_the_whole_tree():
    from tidings.core.channels import pattern_matches
    from tidings.core.multicast.trees import publish_trees
    from tidings.core.reliability.summary import Summary, whole_tree

    assert whole_tree(None, "a/#")
    assert whole_tree(Summary(frozenset({("a/#", ""), ("b", "x > 1")})), "a/#")
    assert not whole_tree(Summary(frozenset({("a/#", "x > 1")})), "a/#")
    assert not whole_tree(Summary(frozenset({("a/b/#", "")})), "a/#")
    for channel in ("a", "a/b", "a/b/c", "z/y"):  # why it holds: a tree's name matches its channels
        assert all(pattern_matches(tree, channel) for tree in publish_trees(channel))

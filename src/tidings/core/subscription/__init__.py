"""A local subscription at its subscriber's broker: subend, lease, tree memberships."""

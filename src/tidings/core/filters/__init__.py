"""Content filters: the language (`parse_filter`, `Filter`) and the subscription index.

    parse_filter('site in ("mit", "ucb") and load > 3.5').matches({"site": "mit", "load": 4.0})
    SubscriptionIndex().add(1, "nodes/+/load", flt); index.match(channel, attributes) -> [1]

docs/filters.md gives the language and its semantics; each module's docstring its design.
"""

from tidings.core.filters.index import SubscriptionIndex
from tidings.core.filters.parser import Filter, parse_filter

__all__ = ["Filter", "SubscriptionIndex", "parse_filter"]

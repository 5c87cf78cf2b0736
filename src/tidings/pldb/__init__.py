"""PLDB, the PlanetLab database of the PsEPR paper (§4), as services on tidings.

Monitors publish host properties on `nodes/<host>/<metric>`; the tuple store (`tuple_store`) keeps
each host's latest properties and answers queries; a value-add service (the Spark job in
`tidings.spark.jobs`) publishes recommendations that the tuple store records; `audit` checks each
stage's stream against what was published. `make run` (`tidings demo`) runs them together.
"""

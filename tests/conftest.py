"""Suite-wide settings. Hypothesis: no per-example deadline (a loaded 2-core CI machine makes
wall-clock deadlines flaky), and on CI a derandomized run so a red build replays exactly."""

import os

from hypothesis import settings

settings.register_profile("tidings", deadline=None, print_blob=True)
settings.register_profile("ci", parent=settings.get_profile("tidings"), derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "tidings")

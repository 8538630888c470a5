"""Test-wide settings: on CI, hypothesis runs derandomized and without per-example deadlines.

A shared 2-core CI machine makes wall-clock deadlines flaky, and a gate should not fail on a
different random draw than the one developers ran; locally, hypothesis explores new examples.
"""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

"""Models that outlive the run: each party's saved part (issue 27)."""

"""Process plumbing shared by the workers: the loop, the health/metrics endpoint."""

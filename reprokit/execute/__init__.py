"""Where the matrix runs: the executors, this host's schedule, a Ray cluster, GPU slots and state."""

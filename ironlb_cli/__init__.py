"""The `ironlb` command line: the state of load balancing, for people and for scripts."""

"""The benchmarks: scripts that print figures (`ipsec-testbed bench`)."""

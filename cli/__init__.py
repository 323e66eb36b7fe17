"""The commands on top of every layer: ``ipsec-testbed`` (main), the classroom demo, the test runner."""

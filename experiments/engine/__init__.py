"""The sweep engine: what any experiment of the testbed is measured with.

- :mod:`.plan`: a sweep's spec, its points and their order, the adaptive repetitions;
- :mod:`.sweep`: the rounds, the run directory, resuming;
- :mod:`.measure`: one point's window, with iperf3 driving the traffic;
- :mod:`.clients`: a point's iperf3 clients through their lifecycle (held or fresh, started ahead,
  connected, stopped);
- :mod:`.monitor`: the bottleneck monitor, the kernel's own counters around the window: their readers
  (:mod:`.counters`), the waits on the test's connections (:mod:`.waits`) and what bounded the point
  (:mod:`.verdict`);
- :mod:`.iperf` and :mod:`.sockdiag`: iperf3's processes, and the sockets' TCP state.

What is measured is data (:mod:`experiments.catalogue`); the commands that measure it are
:mod:`cli`'s.
"""

"""``ipsec-testbed demo TOPOLOGY --web``: the classroom demo as one page in a browser.

The page draws the network (the untrusted link marked, the IPsec ends ringed), charts the goodput
live with a marker where a setting changed, switches IPsec, the profile, the link's rate, the
segment size and the traffic, lists the packets on the untrusted link next to the same packets
decrypted with the run's keys (and downloads them with a Wireshark key file), shows the SAs with
their counters, and walks through the README's lesson step by step.

Where it runs::

    browser --http, 127.0.0.1 only, token--> server (host, cli.webdemo.server)
                                                 |  JSON lines (testbed.channel)
                                                 v
                                             engine (cli.webdemo.engine): the network, where ESP is:
                                               a UML guest (its tty4), or this process (host kernel)

The server always runs on the host, so the page is the same in both backends; only the channel's
carrier differs.  Ctrl-C, SIGTERM or a closed terminal ends the engine (the guest with it) and the
network; `ipsec-testbed clean` finds nothing after.
"""
from __future__ import annotations

import signal
import sys
import threading

from testbed import channel as channels


def run_web(job, port: int) -> int:
    """The demo ``job`` (a :class:`~experiments.job.DemoWork` with ``web``) with its page: the server here,
    on ``port`` (0: any free one), the engine where the network is (:func:`experiments.runner.run`)."""
    from cli.webdemo import engine
    from cli.webdemo.server import DemoServer, Hub
    from experiments import runner

    # a server: a page that went away is a BrokenPipeError to handle, not the end of the demo
    # (the command line asks for SIGPIPE's default, which suits `ipsec-testbed profiles | head`)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    chan = channels.Channel()
    hub = Hub(chan)
    try:
        server = DemoServer(hub, port=port)
    except OSError as e:
        raise SystemExit(f"ipsec-testbed demo: cannot listen on 127.0.0.1:{port}: {e.strerror}") from None
    threading.Thread(target=hub.pump, daemon=True).start()
    server.start()
    print(f"The demo's page (this machine only; the token in it is the key):\n\n    {server.url}\n\n"
          f"Open it in a browser here. Ctrl-C ends the demo and removes its network.", flush=True)
    demo = job.work

    def here(_job) -> int:  # the host kernel has ESP: the engine runs in this process
        return engine.serve(demo.topology, demo.profile, demo.mode, demo.rate_mbit, demo.clients, demo.keying,
                            chan.job_files())

    try:
        rc = runner.run(job, "ipsec-testbed demo", here, channel_fds=chan.job_fds)
    finally:
        chan.job_started()
        chan.close()
        server.close()
        print("demo: network removed, page closed", file=sys.stderr)
    return rc

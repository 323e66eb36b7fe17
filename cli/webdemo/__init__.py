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


def run_web(args, argv: list[str], needs) -> int:
    """The demo with its page: the engine where this process is its job's end, else server + engine."""
    from cli.webdemo import engine

    ends = channels.job_end()
    if ends is not None:  # the engine's end of the channel: in the guest
        return engine.serve(args.topology, args.profile, args.mode, args.rate, args.clients, args.keying, ends)

    from cli.webdemo.server import DemoServer, Hub
    from experiments import runner

    # a server: a page that went away is a BrokenPipeError to handle, not the end of the demo
    # (the command line asks for SIGPIPE's default, which suits `ipsec-testbed profiles | head`)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    chan = channels.Channel()
    hub = Hub(chan)
    try:
        server = DemoServer(hub, port=args.port)
    except OSError as e:
        raise SystemExit(f"ipsec-testbed demo: cannot listen on 127.0.0.1:{args.port}: {e.strerror}") from None
    threading.Thread(target=hub.pump, daemon=True).start()
    server.start()
    print(f"The demo's page (this machine only; the token in it is the key):\n\n    {server.url}\n\n"
          f"Open it in a browser here. Ctrl-C ends the demo and removes its network.", flush=True)
    args.no_speed_probe = True  # the page's goodput is iperf3's; no CPU meter to time
    try:
        rc = runner.follow("ipsec-testbed demo", ("demo",), [*argv, "--web"], args, needs,
                           channel_fds=chan.job_fds)
        if rc is None:  # the host kernel has ESP: the engine runs in this process
            rc = engine.serve(args.topology, args.profile, args.mode, args.rate, args.clients, args.keying,
                              chan.job_files())
    finally:
        chan.job_started()
        chan.close()
        server.close()
        print("demo: network removed, page closed", file=sys.stderr)
    return rc

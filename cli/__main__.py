"""``python -m cli ...`` is ``ipsec-testbed ...`` (how a guest runs a job: no installed script needed)."""
import sys

from cli.main import main

sys.exit(main())

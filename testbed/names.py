"""Names of everything the testbed creates, so that cleanup finds exactly what is ours.

Every network namespace is ``itb-<run id>-<role>``; every interface left in the root
namespace starts with ``itb`` and stays within the kernel's 15 characters; every
User-Mode Linux instance has the umid ``itb-<run id>`` and its pid file under
:data:`STATE_DIR`.  ``ipsec-testbed clean`` removes these and nothing else.
"""
from __future__ import annotations

import os
import re
import secrets
import tempfile

PREFIX = "itb"
#: The environment variable that tells a process it runs inside a guest, and of which backend
#: (``uml``); :mod:`testbed.backends` sets it in the guest.
GUEST_ENV = "IPSEC_TESTBED_BACKEND"
#: The host backend's name: :data:`GUEST_ENV` of processes on the host's own kernel
HOST_BACKEND = "host"
#: Host-side state of running testbed processes (UML pid files).  /run is a tmpfs,
#: so a reboot clears it together with the namespaces it describes.
STATE_DIR = os.environ.get("IPSEC_TESTBED_STATE_DIR", "/run/ipsec-testbed")
IFNAMSIZ = 15


def cache_dir() -> str:
    """What the testbed keeps between runs (built kernels, calibrations): ``$IPSEC_TESTBED_CACHE``, else
    ``$XDG_CACHE_HOME/ipsec-testbed`` or ``~/.cache/ipsec-testbed`` (scripts/build-uml-kernel.sh agrees)."""
    return os.environ.get("IPSEC_TESTBED_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ipsec-testbed")

_RUN_ID = re.compile(r"^[0-9a-f]{4,8}$")


def new_run_id() -> str:
    """A short random run id (6 hex digits) shared by everything one run creates."""
    return secrets.token_hex(3)


def netns_name(run_id: str, role: str) -> str:
    """Name of the network namespace playing ``role`` in run ``run_id``."""
    if not _RUN_ID.match(run_id):
        raise ValueError(f"run id must be 4-8 lowercase hex digits, not {run_id!r}")
    if not re.match(r"^[a-z0-9][a-z0-9_-]*$", role):
        raise ValueError(f"namespace role must be lowercase letters, digits, '-' or '_', not {role!r}")
    return f"{PREFIX}-{run_id}-{role}"


def ifname(run_id: str, suffix: str) -> str:
    """An interface name ``itb<run id><suffix>`` that fits in IFNAMSIZ (15) characters."""
    name = f"{PREFIX}{run_id}{suffix}"
    if len(name) > IFNAMSIZ:
        raise ValueError(f"interface name {name!r} is longer than {IFNAMSIZ} characters")
    return name


def umid(run_id: str) -> str:
    """The User-Mode Linux instance id for run ``run_id``."""
    return f"{PREFIX}-{run_id}"


def ike_dir_prefix(run_id: str) -> str:
    """How the private directory of run ``run_id``'s IKE daemons is named in :func:`ike_base_dir`
    (``itb-<run id>-ike-<random>``: their files and credentials; :mod:`ipsec.ike`)."""
    return f"{PREFIX}-{run_id}-ike-"


_IKE_DIR = re.compile(rf"^{PREFIX}-([0-9a-f]{{4,8}})-ike-")


#: The kernel command line's word that names a counted guest's init script (:mod:`testbed.qemukernel`).
QEMU_INIT_PARAM = "itb.init"
#: A UML guest's init on its kernel's command line: the init script in its run's work directory (the kernel
#: keeps ``init=`` in /proc/cmdline, not ``umid=``)
_GUEST_INIT = re.compile(rf"^init=.*/{PREFIX}-[0-9a-f]+-uml-[^/]+/init\.sh$")


def in_a_guest() -> bool:
    """Whether this process runs on a guest's kernel (UML's, QEMU's; not the host backend's, which is the host's).
    It sees the host's files there (hostfs, 9p) but not the host's processes: every run's work directory would look
    dead to it, another backend's guests' as well as its own.  Known by :data:`GUEST_ENV`, or by the kernel's own
    command line where a process lost it (``sudo`` resets the environment; the host backend inside a guest names
    itself): a kernel the testbed booted has its run's init script there (UML's ``init=``, QEMU's ``itb.init=``)."""
    return os.environ.get(GUEST_ENV, HOST_BACKEND) != HOST_BACKEND or booted_by_the_testbed()


def booted_by_the_testbed(cmdline: str = "/proc/cmdline") -> bool:
    """Whether the running kernel is a guest the testbed booted, by its command line (``cmdline``)."""
    try:
        with open(cmdline) as f:
            words = f.read().split()
    except OSError:
        return False
    return any(_GUEST_INIT.match(w) or w.startswith(f"{QEMU_INIT_PARAM}=") for w in words)


def ike_base_dir() -> str:
    """Where IKE daemons' directories go: inside a guest, the guest's own ``/dev/shm`` (a tmpfs that
    ends with the guest, so a killed guest leaves no key on the host's disk; not ``/run``, which
    each daemon's own is bound over); on the host, the temporary directory (``ipsec-testbed
    clean``, and every run's start, remove what a killed run left there)."""
    return "/dev/shm" if in_a_guest() else tempfile.gettempdir()


def ike_dirs() -> list[str]:
    """Every IKE daemons' directory (in :func:`ike_base_dir`), a live run's too."""
    tmp = ike_base_dir()
    try:
        return sorted(os.path.join(tmp, n) for n in os.listdir(tmp) if _IKE_DIR.match(n))
    except FileNotFoundError:
        return []


def ike_dir_run(path: str) -> str:
    """The run id an IKE daemons' directory belongs to."""
    match = _IKE_DIR.match(os.path.basename(path))
    if not match:
        raise ValueError(f"{path} is not an IKE daemons' directory of the testbed")
    return match.group(1)


def is_ours(name: str) -> bool:
    """True when a namespace, interface or umid name carries the testbed's prefix."""
    return name.startswith(PREFIX + "-") or bool(re.match(rf"^{PREFIX}[0-9a-f]{{4,8}}", name))

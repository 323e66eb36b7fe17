"""``ipsec-testbed clean``: remove what the testbed left behind, and only that.

After a run killed with SIGKILL, these leftovers are possible, all named with the
testbed's prefix (see :mod:`testbed.names`):

- what a backend's runs leave (:meth:`~testbed.backends.KernelBackend.leftovers`): for
  User-Mode Linux its guests, their work directories and their CPU-accounting cgroups;
  killing a guest removes every namespace, SA and process inside it at once;
- network namespaces ``itb-*`` in ``/run/netns``, with the processes inside them;
- interfaces ``itb<run id>*`` in the root namespace (a veth end not yet moved);
- the private directories of IKE daemons, ``itb-<run id>-ike-*`` in the temporary directory,
  with their configuration and pre-shared keys (the daemons themselves end with their
  namespace).

Nothing else is touched: no global xfrm flush, no process matched by name.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import shutil

from testbed import backends, names, netns

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Cleaned:
    """What :func:`clean` removed (or would remove), by kind, for the report."""

    removed: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    def add(self, kind: str, name: str) -> None:
        self.removed.setdefault(kind, []).append(name)

    def empty(self) -> bool:
        return not any(self.removed.values())


def _all_leftovers() -> list[backends.Leftover]:
    return [item for name in backends.names() for item in backends.get(name).leftovers()]


def clean(dry_run: bool = False) -> Cleaned:
    """Remove every backend leftover, testbed namespace and root-namespace interface; see the module doc.

    With ``dry_run`` nothing is touched and the result lists what would be removed.
    Runs in progress lose their guests and namespaces too.
    """
    done = Cleaned()
    for item in _all_leftovers():
        if not dry_run:
            item.remove()
        done.add(item.kind, item.name)
    for name in netns.list_ours():
        pids = netns.pids_in(name) if dry_run else netns.delete(name)
        done.add("namespace", name)
        for pid in pids:
            done.add("process", str(pid))
    for name in _root_interfaces(remove=not dry_run):
        done.add("interface", name)
    for path in names.ike_dirs():
        if not dry_run:
            shutil.rmtree(path, ignore_errors=True)
        done.add("IKE directory", path)
    return done


def remove_dead_leftovers() -> list[str]:
    """Remove what killed runs left that no live run can be using; returns what was removed.

    Namespaces and interfaces are left alone (a run in progress may own them);
    :func:`clean` removes those.  Cheap enough to call when any run starts.
    """
    removed: list[str] = []
    live = {name.split("-")[1] for name in netns.list_ours()}  # itb-<run id>-<role>
    for path in names.ike_dirs():  # its run's namespaces are gone, and its daemons with them
        if names.ike_dir_run(path) not in live:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(f"IKE directory {path}")
    for _ in range(3):  # removing one can free another (a dead guest's processes hold its work directory)
        dead = [item for item in _all_leftovers() if not item.live]
        if not dead:
            break
        for item in dead:
            item.remove()
            if f"{item.kind} {item.name}" not in removed:
                removed.append(f"{item.kind} {item.name}")
    return removed


def _root_interfaces(remove: bool) -> list[str]:
    from pyroute2.iproute.linux import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError

    removed = []
    with IPRoute() as ipr:
        for link in ipr.get_links():
            name = link.get_attr("IFLA_IFNAME")
            if name and name.startswith(names.PREFIX) and names.is_ours(name):
                if not remove:
                    removed.append(name)
                    continue
                with contextlib.suppress(NetlinkError):
                    ipr.link("del", index=link["index"])
                    removed.append(name)
    return removed

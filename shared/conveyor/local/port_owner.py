"""Which process listens on a local TCP port, where Linux's /proc says so cheaply; None elsewhere.

Used only to name the culprit when the embedded AWS cannot bind its port. /proc/net/tcp lists
listening sockets by inode; /proc/<pid>/fd links to them. Other users' processes are not readable,
and are then simply not named.
"""

import os
from pathlib import Path

PROC = Path("/proc")
LISTEN = "0A"  # the TCP state in /proc/net/tcp
MAX_COMMAND_CHARS = 80


def _listening_inodes(port: int, proc: Path) -> set[str]:
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            rows = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == LISTEN and int(local.rsplit(":", 1)[1], 16) == port:
                inodes.add(inode)
    return inodes


def port_owner(port: int, proc: Path = PROC) -> str | None:
    """``"pid 1234 (python -m http.server)"`` for the process listening on ``port``, if it can be found."""
    inodes = _listening_inodes(port, proc)
    if not inodes:
        return None
    sockets = {f"socket:[{inode}]" for inode in inodes}
    for pid_dir in proc.iterdir():
        if pid_dir.name.isdigit() and _links(pid_dir / "fd") & sockets:
            try:
                command = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:  # exited meanwhile
                command = "?"
            return f"pid {pid_dir.name} ({command[:MAX_COMMAND_CHARS]})"
    return None


def _links(fds: Path) -> set[str]:
    """What a process's open file descriptors point at, as far as this user may read them."""
    try:
        entries = list(fds.iterdir())
    except OSError:  # gone, or another user's
        return set()
    links = set()
    for fd in entries:
        try:
            links.add(os.readlink(fd))
        except OSError:  # closed meanwhile
            continue
    return links

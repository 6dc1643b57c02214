"""An emulated cluster of hosts on one machine: one Linux network namespace per host, joined by veth
pairs to a bridge, each host with its own address, hostname and shaped link bandwidth.

    bridge orchbr0 10.77.0.1/24 (the head: where the driver, MLflow and databases listen)
      |- orchv0 <-> eth0 in netns orch-h0, 10.77.0.10, hostname orch-h0, tbf rate B0 both ways
      |- orchv1 <-> eth0 in netns orch-h1, 10.77.0.11, ...

Bandwidth is shaped with ``tc tbf`` on both ends of each host's veth (egress of the host and egress
towards it), so a host's link carries at most its rate in each direction; each queue holds about
3 ms of traffic, like a switch port's shallow buffer (``_burst``, ``_limit``). Latency is **not** emulated:
this kernel has no ``netem``; a link's latency is the veth/bridge path's own (tens of microseconds).

``up`` writes, into the state directory, an Open MPI hostfile (one line per host, ``slots=``), the rsh
agent Open MPI starts remote daemons through (it enters the host's namespace and UTS namespace, so the
ranks of different hosts have different host names, as on real machines), and ``state.json``.
Nothing leaves the machine: only the namespaces' addresses and loopback are used.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from orchestrator.errors import ConfigError
from orchestrator.hardware.units import in_unit, parse_rate

PREFIX = "orch"        # names: namespaces PREFIX-h0.., bridge PREFIXbr0, veths PREFIXv0..
DEFAULT_SUBNET = "10.77.0"
DEFAULT_DIR = Path(os.environ.get("ORCHESTRATOR_NETLAB_DIR", "/run/orchestrator-netlab"))
TCP_PAYLOAD_SHARE = 1448 / 1514


class NetlabUnavailable(ConfigError):
    """This machine does not allow the namespaces (not root, no ``ip netns``, ...)."""


@dataclass
class Host:
    name: str          # the namespace and the host name
    address: str
    bandwidth: str     # tc rate
    slots: int

    @property
    def bandwidth_Bps(self) -> float:
        return parse_rate(self.bandwidth)

    @property
    def payload_Bps(self) -> float:
        """What TCP carries of the shaped rate: tbf counts whole frames, and a full frame of 1514
        bytes (Ethernet 14 + IP 20 + TCP with timestamps 32) carries 1448 bytes of payload."""
        return self.bandwidth_Bps * TCP_PAYLOAD_SHARE


@dataclass
class Lab:
    hosts: list[Host]
    subnet: str
    head: str          # the bridge's address
    dir: str
    prefix: str = PREFIX

    @property
    def bridge(self) -> str:
        return f"{self.prefix}br0"

    @property
    def hostfile(self) -> Path:
        return Path(self.dir) / "hostfile"

    @property
    def agent(self) -> Path:
        return Path(self.dir) / "rsh-agent"

    @property
    def interface(self) -> str:
        return f"{self.subnet}.0/24"

    def host(self, name_or_address: str) -> Host:
        for h in self.hosts:
            if name_or_address in (h.name, h.address):
                return h
        raise ConfigError(f"no emulated host {name_or_address!r} (hosts: {', '.join(h.name for h in self.hosts)})")

    def exec_prefix(self, host: Host) -> list[str]:
        """The command prefix that runs a program on ``host`` (its namespace and host name)."""
        return ["ip", "netns", "exec", host.name, "unshare", "--uts", "/bin/sh", "-c",
                f'hostname {host.name}; export ORCH_NETLAB_HOST={host.name}; exec "$0" "$@"']

    def mpi_args(self) -> list[str]:
        """What ``mpiexec`` needs to start ranks on these hosts: the hostfile, the rsh agent, the
        emulated interfaces for Open MPI's out-of-band and TCP byte-transfer layers. The hosts share this
        machine's cores, so a waiting rank yields its core (``mpi_yield_when_idle``) instead of spinning:
        spinning ranks of other hosts would otherwise delay every message by a scheduler slice."""
        return ["--hostfile", str(self.hostfile), "--prtemca", "plm_ssh_agent", str(self.agent),
                "--mca", "mpi_yield_when_idle", "1",
                "--mca", "btl_tcp_if_include", self.interface, "--mca", "oob_tcp_if_include", self.interface,
                "--prtemca", "oob_tcp_if_include", self.interface]


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(list(cmd), capture_output=True, text=True)
    if check and out.returncode != 0:
        raise NetlabUnavailable(f"netlab: `{' '.join(cmd)}` failed: {(out.stderr or out.stdout).strip()[:300]}")
    return out


def check_allowed() -> None:
    """Raise NetlabUnavailable (one line, why) where this machine does not allow the namespaces."""
    if os.geteuid() != 0:
        raise NetlabUnavailable("netlab needs root (network namespaces, veth pairs, tc)")
    for tool in ("ip", "tc", "unshare"):
        if shutil.which(tool) is None:
            raise NetlabUnavailable(f"netlab needs `{tool}` (Debian: iproute2, util-linux)")
    probe = f"{PREFIX}-probe{os.getpid()}"
    out = _run("ip", "netns", "add", probe, check=False)
    if out.returncode != 0:
        raise NetlabUnavailable(f"this machine does not allow network namespaces: {out.stderr.strip()[:200]}")
    _run("ip", "netns", "del", probe, check=False)


def load(state_dir: Path | str = DEFAULT_DIR) -> Lab | None:
    path = Path(state_dir) / "state.json"
    if not path.exists():
        return None
    d = json.loads(path.read_text())
    return Lab([Host(**h) for h in d["hosts"]], d["subnet"], d["head"], d["dir"], d.get("prefix", PREFIX))


def require(where: str | Path) -> Lab:
    """The lab at ``where`` (a state directory or its hostfile), or a one-line error."""
    path = Path(where)
    lab = load(path.parent if path.is_file() else path)
    if lab is None:
        raise ConfigError(f"hardware.netlab={str(where)!r}: no emulated cluster there "
                          "(start one with: python -m orchestrator.netlab up)")
    return lab


def lab_of_hostfile(hostfile: str | Path | None) -> Lab | None:
    """The lab a hostfile was written by (its ``state.json`` beside it), else None."""
    if not hostfile:
        return None
    return load(Path(hostfile).resolve().parent)


def _bandwidths(bandwidth: str | list[str], n: int) -> list[str]:
    rates = [b.strip() for b in (bandwidth.split(",") if isinstance(bandwidth, str) else bandwidth) if str(b).strip()]
    if len(rates) == 1:
        rates = rates * n
    if len(rates) != n:
        raise ConfigError(f"--bandwidth gives {len(rates)} rates for {n} hosts (give one, or one per host)")
    for r in rates:
        parse_rate(r)
    return rates


def up(hosts: int, bandwidth: str | list[str] = "1gbit", slots: int = 1, subnet: str = DEFAULT_SUBNET,
       state_dir: Path | str = DEFAULT_DIR, prefix: str = PREFIX) -> Lab:
    """Create the lab (idempotent: an identical lab is kept, a different one is replaced). Labs with
    different prefixes, subnets and state directories coexist."""
    if not re.fullmatch(r"[a-z][a-z0-9]{0,7}", prefix):
        raise ConfigError(f"--prefix={prefix!r} must be 1-8 lowercase letters/digits (interface names are short)")
    if not isinstance(hosts, int) or not 1 <= hosts <= 200:
        raise ConfigError(f"--hosts={hosts!r} must be an integer from 1 to 200")
    if not isinstance(slots, int) or slots < 1:
        raise ConfigError(f"--slots={slots!r} must be an integer >= 1")
    if not re.fullmatch(r"10\.\d{1,3}\.\d{1,3}", subnet):
        raise ConfigError(f"--subnet={subnet!r} must be the first three octets of a private 10.x.y.0/24")
    rates = _bandwidths(bandwidth, hosts)
    state_dir = Path(state_dir)
    wanted = Lab([Host(f"{prefix}-h{i}", f"{subnet}.{10 + i}", rates[i], slots) for i in range(hosts)],
                 subnet, f"{subnet}.1", str(state_dir), prefix)
    current = load(state_dir)
    if current is not None and asdict(current) == asdict(wanted) and _alive(current):
        return current
    down(state_dir, prefix)
    check_allowed()
    try:
        _run("ip", "link", "add", wanted.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{wanted.head}/24", "dev", wanted.bridge)
        _run("ip", "link", "set", wanted.bridge, "up")
        for i, h in enumerate(wanted.hosts):
            veth = f"{prefix}v{i}"
            _run("ip", "netns", "add", h.name)
            _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", h.name)
            _run("ip", "link", "set", veth, "master", wanted.bridge, "up")
            _run("ip", "-n", h.name, "addr", "add", f"{h.address}/24", "dev", "eth0")
            _run("ip", "-n", h.name, "link", "set", "eth0", "up")
            _run("ip", "-n", h.name, "link", "set", "lo", "up")
            _run("ip", "-n", h.name, "route", "add", "default", "via", wanted.head)
            for ns, dev in ((None, veth), (h.name, "eth0")):   # both directions
                tc = ["tc"] + (["-n", ns] if ns else []) + ["qdisc", "replace", "dev", dev, "root", "tbf",
                                                            "rate", h.bandwidth, "burst", f"{_burst(h)}b",
                                                            "limit", f"{_limit(h)}b"]
                _run(*tc)
        _write_files(wanted)
    except BaseException:
        down(state_dir, prefix)
        raise
    return wanted


def _burst(h: Host) -> int:
    """tbf bucket: 1 ms of traffic at the rate, and at least one 64 KiB segmentation-offload packet
    (TCP hands veth 64 KiB super-packets; a smaller bucket drops their tails: retransmission storms)."""
    return max(64 * 1024, int(h.bandwidth_Bps / 1000))


def _limit(h: Host) -> int:
    """tbf queue: 3 ms of traffic (a switch port's shallow buffer; deep ones delay MPI's handshakes
    behind data), and room for two offload packets."""
    return max(2 * _burst(h), int(h.bandwidth_Bps * 0.003))


def _write_files(lab: Lab) -> None:
    d = Path(lab.dir)
    d.mkdir(parents=True, exist_ok=True)
    lab.hostfile.write_text("".join(f"{h.address} slots={h.slots}\n" for h in lab.hosts))
    cases = "".join(f"  {h.address}|{h.name}) ns={h.name};;\n" for h in lab.hosts)
    lab.agent.write_text(
        "#!/bin/sh\n# Open MPI rsh agent of the netlab: `rsh-agent HOST COMMAND...` runs COMMAND on the emulated\n"
        "# HOST (its network namespace, its own host name).\n"
        'host="$1"; shift\ncase "$host" in\n' + cases +
        '  *) echo "netlab: unknown host $host" >&2; exit 255;;\nesac\n'
        'exec ip netns exec "$ns" unshare --uts /bin/sh -c "hostname $ns; export ORCH_NETLAB_HOST=$ns; $*"\n')
    lab.agent.chmod(0o755)
    (d / "state.json").write_text(json.dumps(asdict(lab), indent=1))


def _alive(lab: Lab) -> bool:
    names = set(_run("ip", "netns", "list", check=False).stdout.split())
    return all(h.name in names for h in lab.hosts) and Path(lab.agent).exists()


def pids(host: str) -> list[int]:
    out = _run("ip", "netns", "pids", host, check=False)
    return [int(p) for p in out.stdout.split() if p.isdigit()]


def occupied(hosts: list[str]) -> set[str]:
    """Which of these hosts run a process now, in one pass over /proc (``pids`` runs ``ip netns pids``
    once per host: too slow to tell which host emptied first when a whole job ends within 0.1 s)."""
    inode = {}
    for h in hosts:
        try:
            inode[os.stat(f"/run/netns/{h}").st_ino] = h
        except OSError:
            pass
    found: set[str] = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                host = inode.get(os.stat(f"/proc/{entry.name}/ns/net").st_ino)
            except OSError:
                continue
            if host is not None:
                found.add(host)
    return found


def kill_host(host: str, sig: int = signal.SIGKILL) -> int:
    """Kill every process of an emulated host (a host that dies); returns how many there were."""
    victims = pids(host)
    for p in victims:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass
    return len(victims)


def down(state_dir: Path | str = DEFAULT_DIR, prefix: str | None = None) -> None:
    """Remove every namespace, veth and bridge of the lab (its processes are killed first); the
    prefix is the lab's own (from its state), else the one given."""
    lab = load(state_dir)
    prefix = lab.prefix if lab is not None else (prefix or PREFIX)
    names = [n for n in _run("ip", "netns", "list", check=False).stdout.split() if n.startswith(f"{prefix}-h")]
    for ns in names:
        kill_host(ns)
    deadline = time.monotonic() + 5
    while any(pids(ns) for ns in names) and time.monotonic() < deadline:
        time.sleep(0.1)
    for ns in names:
        _run("ip", "netns", "del", ns, check=False)   # its veth end goes with it, and so the pair
    # ... but only once the kernel has destroyed the namespace, which it does asynchronously (and not at
    # all while a process still holds it): delete the head's ends ourselves (a veth goes with its peer)
    # and wait until their names are free, or the next `up` of this prefix finds them ("File exists").
    for veth in _veths(prefix):
        _run("ip", "link", "del", veth, check=False)
    if Path(f"/sys/class/net/{prefix}br0").exists():
        _run("ip", "link", "del", f"{prefix}br0", check=False)
    deadline = time.monotonic() + 10
    while (_veths(prefix) or Path(f"/sys/class/net/{prefix}br0").exists()) and time.monotonic() < deadline:
        time.sleep(0.1)
    d = Path(state_dir)
    for f in ("state.json", "hostfile", "rsh-agent"):
        (d / f).unlink(missing_ok=True)


def _veths(prefix: str) -> list[str]:
    """The head's ends of a lab's veth pairs (``{prefix}v0``, ``{prefix}v1``, ...) that exist now."""
    net = Path("/sys/class/net")
    return sorted(p.name for p in net.glob(f"{prefix}v*") if re.fullmatch(rf"{prefix}v\d+", p.name)) \
        if net.exists() else []


def status(state_dir: Path | str = DEFAULT_DIR) -> str:
    lab = load(state_dir)
    if lab is None:
        return "netlab: down"
    rows = [f"netlab: {len(lab.hosts)} hosts, head {lab.head}, hostfile {lab.hostfile}"
            + ("" if _alive(lab) else " (namespaces missing: run `up` again)")]
    rows += [f"  {h.name:10s} {h.address:13s} {h.bandwidth:>8s}  slots={h.slots}  processes={len(pids(h.name))}"
             for h in lab.hosts]
    return "\n".join(rows)


def rank_hosts(lab: Lab, ranks: int) -> list[Host]:
    """The host each MPI rank runs on under the launcher's ``--map-by slot:OVERSUBSCRIBE``: hosts take
    their slots in turn; beyond the slots, ranks are spread evenly, the first hosts taking one more.
    (The ranks record their host, ``rank{r}.host``, so this can be checked after a run.)"""
    total = sum(h.slots for h in lab.hosts)
    if ranks <= total:
        counts, left = [], ranks
        for h in lab.hosts:
            counts.append(min(h.slots, left))
            left -= counts[-1]
    else:
        n = len(lab.hosts)
        counts = [ranks // n + (1 if i < ranks % n else 0) for i in range(n)]
    return [h for h, c in zip(lab.hosts, counts) for _ in range(c)]


def network_config(lab: Lab, workers: int, server: bool) -> dict:
    """``hardware.network`` for the sync cost model that describes W workers (and the parameter server
    as rank 0, when ``server``) on this lab: each worker's link is its host's shaped bandwidth, the
    server's is its host's (TCP payload rates); a worker on the server's own host talks to it without crossing a link
    (loopback: modelled as 100 Gbit/s). Latency: not emulated (see the module docstring); the veth
    path's own, ~50 us, is the cost model's default."""
    hosts = rank_hosts(lab, workers + (1 if server else 0))
    server_host = hosts[0] if server else None
    worker_hosts = hosts[1:] if server else hosts
    gbps = lambda h: in_unit(h.payload_Bps, "Gbit/s")  # noqa: E731
    per = {i: {"bandwidth_Gbps": 100.0 if h is server_host else gbps(h)} for i, h in enumerate(worker_hosts)}
    out = {"workers": per}
    if server_host is not None:
        out["server"] = {"bandwidth_Gbps": gbps(server_host)}
    return out

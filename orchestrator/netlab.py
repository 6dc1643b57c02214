"""``python -m orchestrator.netlab up|down|status|exec|kill``: an emulated cluster of hosts on this
machine (network namespaces; see ``orchestrator.hardware.netlab``).

    python -m orchestrator.netlab up --hosts 4 --bandwidth 1gbit,1gbit,100mbit,100mbit   # last line: the hostfile
    python -m orchestrator.netlab exec orch-h1 -- python -m orchestrator.tf_server --port 2222
    python -m orchestrator.netlab kill orch-h2          # every process of that host (a host that dies)
    python -m orchestrator.netlab status
    python -m orchestrator.netlab down
"""

from __future__ import annotations

import argparse
import os
import sys

from orchestrator.errors import UserError


def main(argv: list[str] | None = None) -> int:
    from orchestrator.hardware import netlab

    p = argparse.ArgumentParser(prog="python -m orchestrator.netlab", description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", default=str(netlab.DEFAULT_DIR), help="state directory (hostfile, rsh agent, state.json)")
    sub = p.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up", help="create the hosts (idempotent); prints the hostfile's path last")
    u.add_argument("--hosts", type=int, default=2)
    u.add_argument("--bandwidth", default="1gbit", help="one tc rate, or one per host: 1gbit,100mbit,...")
    u.add_argument("--slots", type=int, default=1, help="MPI slots per host")
    u.add_argument("--subnet", default=netlab.DEFAULT_SUBNET, help="first three octets of a 10.x.y.0/24")
    u.add_argument("--prefix", default=netlab.PREFIX, help="names: namespaces PREFIX-h0.., bridge PREFIXbr0")
    sub.add_parser("down", help="remove the hosts and everything running on them")
    sub.add_parser("status")
    e = sub.add_parser("exec", help="run a command on a host: exec HOST -- CMD...")
    e.add_argument("host")
    e.add_argument("command", nargs=argparse.REMAINDER)
    k = sub.add_parser("kill", help="kill every process of a host")
    k.add_argument("host")
    args = p.parse_args(argv)
    try:
        if args.cmd == "up":
            lab = netlab.up(args.hosts, args.bandwidth, args.slots, args.subnet, args.dir, args.prefix)
            print(netlab.status(args.dir))
            print(lab.hostfile)
        elif args.cmd == "down":
            netlab.down(args.dir)
            print("netlab: down")
        elif args.cmd == "status":
            print(netlab.status(args.dir))
        elif args.cmd == "kill":
            lab = netlab.load(args.dir)
            host = lab.host(args.host) if lab else None
            print(f"killed {netlab.kill_host(host.name if host else args.host)} processes on {args.host}")
        else:
            lab = netlab.load(args.dir)
            if lab is None:
                raise UserError("netlab is down: run `python -m orchestrator.netlab up` first")
            cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
            if not cmd:
                raise UserError("exec needs a command: exec HOST -- CMD...")
            argv_ = lab.exec_prefix(lab.host(args.host)) + cmd
            os.execvp(argv_[0], argv_)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

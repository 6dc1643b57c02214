"""``python -m orchestrator.tf_server --cluster HOST:PORT,HOST:PORT,... --task I``: one TensorFlow gRPC
server (task I of job ``worker``) on this host, serving until it is stopped (SIGTERM, Ctrl-C).

Start one per host, all with the same ``--cluster`` list, then point a trial at them:
``python -m orchestrator hardware=tf_cluster 'hardware.addresses=[HOST:PORT,HOST:PORT]' +placer=greedy``
(task i's CPU is the trial's device ``cpu:i``)."""

from __future__ import annotations

import argparse
import json
import signal
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m orchestrator.tf_server", description=__doc__.split("\n\n")[0])
    p.add_argument("--cluster", required=True, help="every task's HOST:PORT, comma-separated, in task order")
    p.add_argument("--task", type=int, default=0, help="this server's index in --cluster")
    p.add_argument("--threads", type=int, default=0, help="TensorFlow intra/inter-op threads (0: TF's default)")
    args = p.parse_args(argv)
    addresses = [a.strip() for a in args.cluster.split(",") if a.strip()]
    bad = [a for a in addresses if not a.rpartition(":")[2].isdigit()]
    if not addresses or bad:
        print(f"error: --cluster={args.cluster!r}: every entry must be HOST:PORT", file=sys.stderr)
        return 2
    if not 0 <= args.task < len(addresses):
        print(f"error: --task={args.task} is not an index of the {len(addresses)} --cluster entries", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    from orchestrator.hardware.tf_cluster import serve

    try:
        serve(json.dumps({"worker": addresses}), "worker", args.task, args.threads, 0)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

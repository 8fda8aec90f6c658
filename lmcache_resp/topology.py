"""Explains where lmcache-resp would place its I/O threads and memory, and why.

    python -m lmcache_resp.topology [--host H] [--port P] [--cpu-affinity auto] [--num-workers 8]

It finds the local interface that routes to the server, that NIC's hwloc device and NUMA
node, and the CPUs and memory node it would use. Nothing is bound and no connection is made.
``--topology-xml`` plans on an hwloc XML description instead of this host, and ``--interface``
names the interface to follow.
"""

from __future__ import annotations

import argparse
import json
import sys

from lmcache_resp import _native
from lmcache_resp.settings import RespSettings
from lmcache_resp.errors import RespError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lmcache_resp.topology", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--host", help="server host (default: $LMCACHE_RESP_HOST or localhost)")
    parser.add_argument("--port", type=int, help="server port (default: $LMCACHE_RESP_PORT or 6379)")
    parser.add_argument("--url", help="resp://, redis:// or unix:// URL instead of --host/--port")
    parser.add_argument("--cpu-affinity", default="auto", help="auto (default), none, a CPU list like 0-3,8, or numa:N")
    parser.add_argument("--num-workers", type=int, default=8, help="I/O threads to place (default 8)")
    parser.add_argument("--topology-xml", help="plan on this hwloc XML topology instead of the host")
    parser.add_argument("--interface", help="follow this network interface instead of the route to the server")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    args = parser.parse_args(argv)
    if args.num_workers < 1:
        parser.error(f"--num-workers must be at least 1, got {args.num_workers}")
    try:
        settings = RespSettings.resolve(
            args.url, host=args.host, port=args.port, cpu_affinity=args.cpu_affinity, num_workers=args.num_workers
        )
        plan = _native.explain_placement(settings, topology_xml=args.topology_xml, interface=args.interface)
    except RespError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"server": settings.endpoint, **plan}, indent=2))
        return 0
    cpus = plan["worker_cpus"]
    print(f"server:       {settings.endpoint}")
    print(f"topology:     {args.topology_xml or 'this host'}")
    print(f"cpu_affinity: {args.cpu_affinity}")
    print(f"workers:      {', '.join('unpinned' if c is None else f'CPU {c}' for c in cpus)}")
    node = plan["memory_node"]
    print(f"memory node:  {'not bound' if node is None else node}")
    print("why:")
    for line in plan["explanation"]:
        print(f"  - {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

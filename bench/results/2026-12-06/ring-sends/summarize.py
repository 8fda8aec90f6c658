"""One line from a `python -m lmcache_resp.bench --json` report: SET and GET GB/s, SET and GET CPU
seconds per GB, and the I/O loop the report names ("?" before the header named it)."""

import json
import sys

report = json.load(open(sys.argv[1]))
ops = report["clients"][0]["ops"]
loop = report["server"].get("io_loop", {}).get("loop", "?")
print(f"{report['results']['set']:.3f} {report['results']['get']:.3f} "
      f"{ops['set']['cpu_per_gb']:.3f} {ops['get']['cpu_per_gb']:.3f} {loop}")

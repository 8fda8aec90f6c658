"""``python -m lmcache_resp.bench``"""

from lmcache_resp.bench.cli import main

raise SystemExit(main())

"""``python -m lmcache_resp_testing``: see lmcache_resp_testing.cli."""

import sys

from lmcache_resp_testing.cli import main

sys.exit(main())

from __future__ import annotations

import sys

from local.demo.runner import main

sys.exit(main())

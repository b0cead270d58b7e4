from __future__ import annotations

import sys

from demo.runner import main

sys.exit(main())

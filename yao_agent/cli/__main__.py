"""`python -m yao_agent.cli`: the `yao-agent` command, without its script (how `serve --workers` starts them)."""

import sys

from yao_agent.cli.main import main

sys.exit(main())

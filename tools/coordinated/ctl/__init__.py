"""The command-line client: `coordinated kv|lock|elect|session|endpoint|member|snapshot|settings|local`.

Every command talks to the cluster through `coordinated.client` and has no HTTP code of its own. The
connection options, the output formats and the exit codes are shared (connection.py, output.py,
failures.py); docs/cli.md is the user's guide.
"""

import sys

# `import httpx` imports httpx's own command line, and with it rich, pygments and click's terminal helpers when
# they are installed (encode/httpx#3547): a third of `coordinated kv get`'s start-up. This command line never
# runs httpx's, so httpx takes its fallback (a `main` that only says it cannot run).
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]  # None: "not importable"

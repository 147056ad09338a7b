"""The command-line client: `coordinated kv|lock|elect|session|endpoint|member|snapshot|settings|local`.

Every command talks to the cluster through `coordinated.client` and has no HTTP code of its own. The
connection options, the output formats and the exit codes are shared (connection.py, output.py,
failures.py); docs/cli.md is the user's guide.
"""

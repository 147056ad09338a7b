"""Jepsen-style fault runs on real node processes in network namespaces (`make chaos`, docs/chaos.md)."""

"""Zen1's discovery settings, retired: each `discovery.zen.*` name is refused with what replaced it."""

from __future__ import annotations


def retired_setting_message(name: str) -> str | None:
    if name == "discovery.zen.minimum_master_nodes":
        return (
            "setting [discovery.zen.minimum_master_nodes] is from Zen1 discovery and is not supported: "
            "the voting configuration now sets the quorum automatically; use cluster.initial_master_nodes "
            "to bootstrap a new cluster"
        )
    if name.startswith("discovery.zen."):
        replacement = {
            "discovery.zen.ping.unicast.hosts": "discovery.seed_hosts",
            "discovery.zen.hosts_provider": "discovery.seed_hosts",
            "discovery.zen.no_master_block": "cluster.no_master_block",
            "discovery.zen.commit_timeout": "cluster.publish.timeout",
            "discovery.zen.publish_timeout": "cluster.publish.timeout",
            "discovery.zen.fd.ping_interval": "cluster.fault_detection.*.interval",
            "discovery.zen.fd.ping_timeout": "cluster.fault_detection.*.timeout",
            "discovery.zen.fd.ping_retries": "cluster.fault_detection.*.retry_count",
        }.get(name, "the cluster.* and discovery.* settings of Zen2 discovery")
        return f"setting [{name}] is from Zen1 discovery and is not supported; use {replacement} instead"
    return None

"""Writes docs/settings.md from the settings registries, so the documented settings are the parsed ones.

    python -m coordinated.operator.settings_doc            # rewrite docs/settings.md
    python -m coordinated.operator.settings_doc --check    # exit 1 when docs/settings.md is out of date

Names, defaults, which settings are required or dynamic, and the Zen1 replacements come from the
registries (`coordinated.coordination.settings` for the protocol, `coordinated.sidecar.config` for the
sidecar service); who may set a setting on Kubernetes comes from the operator's validation. Only the
one-line meanings and bounds below are written by hand, and a test fails when a registered setting has
none (or a meaning outlives its setting).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path

from coordinated.coordination.settings import (
    Setting,
    SettingsError,
    coordination_registry,
    retired_setting_message,
)
from coordinated.operator.settings_validation import USER_SETTINGS, operator_managed
from coordinated.sidecar.config import SIDECAR_SETTINGS

DOC = Path(__file__).resolve().parents[3] / "docs" / "settings.md"

MEANINGS: dict[str, str] = {
    "cluster.name": "the cluster's name; nodes with different names never join each other "
    "(1-63 letters, digits, `.`, `_`, `-`)",
    "node.name": "this node's name, unique in the cluster",
    "node.roles": "`master` for a master-eligible node, `[]` for a node that never votes or leads",
    "discovery.seed_hosts": "`host:port` transport addresses to discover peers from",
    "cluster.initial_master_nodes": "node names for the very first election of a new cluster; "
    "ignored once a node has joined a cluster",
    "discovery.find_peers_interval": "pause between discovery rounds",
    "discovery.cluster_formation_warning_timeout": "how long without a master before the node logs why",
    "cluster.election.initial_timeout": "upper bound of the first random election delay (1ms to 10s)",
    "cluster.election.back_off_time": "added to the delay bound after each failed election (1ms to 60s)",
    "cluster.election.max_timeout": "largest election delay bound (200ms to 300s; at least `initial_timeout`)",
    "cluster.election.duration": "how long an election may take before the next one is scheduled (1ms to 300s)",
    "cluster.fault_detection.leader_check.interval": "followers check the master this often (at least 100ms)",
    "cluster.fault_detection.leader_check.timeout": "a leader check fails after this long",
    "cluster.fault_detection.leader_check.retry_count": "failed leader checks in a row before a new election "
    "(at least 1)",
    "cluster.fault_detection.follower_check.interval": "the master checks each follower this often (at least 100ms)",
    "cluster.fault_detection.follower_check.timeout": "a follower check fails after this long",
    "cluster.fault_detection.follower_check.retry_count": "failed follower checks in a row before the "
    "master removes the node (at least 1)",
    "cluster.publish.timeout": "how long the master waits for a publication to commit",
    "cluster.publish.master_applies_last": "`true` (Elasticsearch's order): the master applies a committed state, "
    "and answers the writes in it, once a quorum of nodes has applied it; `false`: as soon as it has committed its "
    "own copy, which takes one round trip off every write (the followers apply as their commits arrive; reads "
    "without `?local` stay linearizable)",
    "cluster.publish.diff_history.max_diffs": "how many recent diffs each node keeps to catch a lagging or "
    "restarted node up without the full state (0: always the full state)",
    "cluster.publish.diff_history.max_size": "the most bytes (encoded) those diffs may take; the oldest go first",
    "node.event_loop": "`uvloop` (libuv's event loop) or `asyncio` (the standard library's)",
    "persistence.sync": "where the durable store's fsync runs: `inline` (on the event loop; each term or accepted-state "
    "write is durable when it returns) or `background` (a worker thread with group commit: every message, reply and "
    "apply that follows a write waits for one fsync covering it; a failed fsync silences the node until it is "
    "restarted); docs/benchmarks.md has the A/B",
    "cluster.follower_lag.timeout": "a follower that has not applied a committed state after this long is removed",
    "cluster.no_master_block": "what is refused without a master: `write` (writes), `metadata_write` or `all` "
    "(reads too)",
    "cluster.auto_shrink_voting_configuration": "`true` removes departed nodes from the voting configuration "
    "(keeping at least 3 voters)",
    "cluster.max_voting_config_exclusions": "most voting exclusions at once (at least 1)",
    "cluster.metadata.max_value_size": "largest value of one key, JSON-encoded; a larger put gets 400 naming "
    "the sizes (a body also needs to fit `http.max_content_length`)",
    "cluster.metadata.max_state_size": "ceiling on all keys and values together (UTF-8 names plus JSON values), "
    "decided by the master against the batch it builds; a write that would exceed it gets 400 naming the sizes",
    "transport.secret_file": "file with the cluster secret (at least 16 bytes); enables transport authentication",
    "transport.request_timeout": "time to wait for a peer to open a stream",
    "transport.connect_timeout": "TCP connect timeout to a peer",
    "transport.retries": "retries when a message was certainly not delivered (0 or more)",
    "transport.queue_size": "per-destination send queue; messages beyond it are dropped",
    "transport.max_chunk_size": "largest frame on a peer stream (4kb to 64mb); a larger message, such as a "
    "multi-MB full state, goes in chunks that the receiver reassembles and verifies; set the same on every node "
    "(a node refuses frames over its own)",
    "http.max_content_length": "client request body limit (413 beyond it)",
    "history.segment_size": "history segment rotation size",
    "history.fsync": "`true` fsyncs each history line",
    "hooks.timeout": "timeout of one hook notification",
    "watch.change_log.size": "key changes each node keeps for watches (1 to 1000000); a watch from before them gets 410",
    "path.repo": "comma list of absolute directories that `fs` snapshot repositories may live under "
    "(none: snapshots are off)",
    # Security (docs/sidecar.md#security): static, files checked at startup and reloaded when they change.
    "transport.ssl.enabled": "`true` for mutual TLS between nodes",
    "transport.ssl.certificate": "this node's transport certificate (PEM)",
    "transport.ssl.key": "the transport certificate's private key (PEM)",
    "transport.ssl.certificate_authorities": "the cluster's CA (PEM); a peer's certificate must chain to it",
    "http.ssl.enabled": "`true` for HTTPS on the client port's published address",
    "http.ssl.certificate": "the client port's certificate (PEM)",
    "http.ssl.key": "the client port certificate's private key (PEM)",
    "http.ssl.certificate_authorities": "CAs for client certificates (PEM)",
    "http.ssl.client_authentication": "client certificates: `none`, `optional` or `required`",
    "http.auth.tokens_file": "file of `ROLE TOKEN` lines (`admin`, `writer`, `reader`); without it, no authentication",
    # The history archive and the S3 clients (docs/sidecar.md#the-history-archive).
    "history.archive.type": "`s3` uploads every closed history segment to object storage; unset: no archive",
    "history.archive.s3.bucket": "the archive's bucket (required with `history.archive.type: s3`)",
    "history.archive.s3.base_path": "key prefix in the bucket; objects go under "
    "`BASE_PATH/CLUSTER_UUID/NODE_ID/segment-N...`",
    "history.archive.s3.client": "the `s3.client.NAME` the archive uses",
    "s3.client.*.endpoint": "`host[:port]` (with `protocol`) or an `http(s)://` URL of an S3-compatible service; "
    "none: AWS's endpoint for the region",
    "s3.client.*.protocol": "`https` or `http`, for an endpoint given as `host[:port]`",
    "s3.client.*.region": "the region requests are signed for",
    "s3.client.*.path_style_access": "`true` addresses buckets as `endpoint/bucket/key` (most S3-compatible "
    "services), `false` as `bucket.endpoint/key`",
    "s3.client.*.credentials_file": "an AWS credentials file whose `[default]` profile holds the keys (re-read "
    "every 20 minutes); none: the environment (`AWS_ACCESS_KEY_ID`...), a web-identity token "
    "(`AWS_WEB_IDENTITY_TOKEN_FILE`, `AWS_ROLE_ARN`) or the instance's role",
    "s3.client.*.read_timeout": "how long to wait for an answer before the request is retried",
    "s3.client.*.max_retries": "retries of a failed request, with exponential backoff (0 to 20)",
    "s3.client.*.access_key": "refused: credentials never go in settings (see `credentials_file`)",
    "s3.client.*.secret_key": "refused: credentials never go in settings (see `credentials_file`)",
    "s3.client.*.session_token": "refused: credentials never go in settings (see `credentials_file`)",
}

# Zen1 names users are most likely to bring along; the registry rejects every discovery.zen.* name.
ZEN1_EXAMPLES = (
    "discovery.zen.minimum_master_nodes",
    "discovery.zen.ping.unicast.hosts",
    "discovery.zen.no_master_block",
    "discovery.zen.commit_timeout",
    "discovery.zen.publish_timeout",
    "discovery.zen.fd.ping_interval",
    "discovery.zen.fd.ping_timeout",
    "discovery.zen.fd.ping_retries",
)


def all_settings() -> list[Setting]:
    return [*coordination_registry().settings.values(), *SIDECAR_SETTINGS]


def _on_kubernetes(name: str) -> str:
    if name in USER_SETTINGS:
        return "`spec.settings`"
    if operator_managed(name) is not None:
        return "set by the operator"
    return "not settable"


def _rows(settings: Iterable[Setting]) -> list[str]:
    rows = ["| setting | default | dynamic | on Kubernetes | meaning |", "|---|---|---|---|---|"]
    for setting in settings:
        default = "required" if setting.required else (f"`{setting.default}`" if setting.default else "none")
        dynamic = "yes" if setting.dynamic else "no"
        meaning = MEANINGS.get(setting.name, "")
        rows.append(f"| `{setting.name}` | {default} | {dynamic} | {_on_kubernetes(setting.name)} | {meaning} |")
    return rows


def _example_rejection() -> str:
    try:
        coordination_registry().parse_one("cluster.publish.timeout", "30")
    except SettingsError as error:
        return str(error)
    raise AssertionError("cluster.publish.timeout accepted a time without a unit")


def render() -> str:
    coordination = list(coordination_registry().settings.values())
    lines = [
        "# Settings",
        "",
        "<!-- Generated by `python -m coordinated.operator.settings_doc` from the settings registries;"
        " do not edit. -->",
        "",
        "A node takes its settings as strings: `-E key=value` on `coordinated node`, `spec.settings` of a",
        "CoordinatedCluster (which the operator passes on as `-E`), and, for the dynamic ones,",
        "`PUT /_cluster/settings`. Times take a unit (`500ms`, `1s`, `2m`, `1h`, `1d`); sizes take `b`, `kb`,",
        "`mb` or `gb`. An unknown, invalid or Zen1 setting stops the node at startup (exit code 2), is refused",
        "by `PUT /_cluster/settings`, and is rejected by the API server or, for ranges and rules between",
        "settings, by the operator (the `ReconciliationComplete` condition and a `ScalingRefused` event).",
        f"Every message names the setting, for example `{_example_rejection()}`.",
        "",
        "## Coordination",
        "",
        *_rows(coordination),
        "",
        "Rules between settings: `cluster.election.max_timeout` must be at least `cluster.election.initial_timeout`.",
        "",
        "## Sidecar service",
        "",
        *_rows(SIDECAR_SETTINGS),
        "",
        "## Zen1 settings",
        "",
        "Every `discovery.zen.*` setting is rejected with what replaced it:",
        "",
        *[f"- `{name}`: {retired_setting_message(name)}" for name in ZEN1_EXAMPLES],
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is out of date")
    parser.add_argument("--output", type=Path, default=DOC)
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date: run python -m coordinated.operator.settings_doc", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

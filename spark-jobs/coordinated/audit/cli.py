"""`coordinated audit`: audit history files, folders, globs, Parquet or live sidecars.

Exit codes (docs/audit.md): 0 no violations, 1 violations, 2 unusable input, 3 the audit did not complete (a Spark
or JVM failure, or any other unexpected error: nothing was judged, so it is never reported as violations).
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import click

from coordinated.programs import run_program

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from coordinated.audit.reading import Input

EXIT_OK, EXIT_VIOLATIONS, EXIT_UNUSABLE, EXIT_INCOMPLETE = 0, 1, 2, 3


_READ_FAILED = re.compile(r"(?:error while reading file|reading file|read file)\s+(\S+?)[.,]?(?:\s|$)", re.I)
_CAUSE = re.compile(r"(?:Caused by: )?((?:java|org\.apache|parquet)\.[\w.$]+(?:Exception|Error)[^\n]*)")


# How the Python reader words a segment it cannot read (`segments.UnreadableSegment`): the file, then why.
_SEGMENT_FAILED = re.compile(r"error while reading file \S+?: (.+)")


def unreadable_file(error: BaseException) -> str | None:
    """The file a Spark read failure names, if this is one (`FAILED_READ_FILE` and its kin)."""
    m = _READ_FAILED.search(str(error))
    if m is None:
        return None
    from coordinated.audit.reading import display_source

    return display_source(m.group(1).rstrip(":"))


def why_unreadable(error: BaseException) -> str:
    """Why a file could not be read: the Python reader's own reason (a segment cut short, damaged, of another
    format) when the failure carries it, else the JVM's root cause."""
    m = _SEGMENT_FAILED.search(str(error))
    return m.group(1).strip()[:300] if m is not None else first_cause(error)


def first_cause(error: BaseException) -> str:
    """The root exception's one-line message from a JVM error, without its stack trace."""
    causes = _CAUSE.findall(str(error))
    return causes[-1].strip()[:300] if causes else str(error).splitlines()[0][:300]


def what_failed(error: BaseException) -> str:
    """One line naming what stopped an audit that did not complete (a JVM error's root cause, else the
    Python exception), without a stack trace."""
    text = str(error)
    if _CAUSE.search(text):
        return first_cause(error)
    first = text.splitlines()[0][:300] if text.strip() else ""
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def did_not_complete(error: BaseException) -> int:
    print(f"coordinated audit: the audit did not complete: {what_failed(error)}", file=sys.stderr)
    return EXIT_INCOMPLETE


DESCRIPTION = (
    "Audit history files (JSONL, or Parquet made by --compact-to) against the protocol's safety invariants. Exit 0: "
    "no violations, 1: violations, 2: unusable input, 3: the audit did not complete (a Spark or JVM failure such as "
    "running out of memory, or another unexpected error; nothing was judged)."
)
OBJECT_STORAGE = (
    "Object storage, for s3://BUCKET/PREFIX paths (the history archive): the --s3-* options; credentials come from "
    "the standard AWS sources (AWS_ACCESS_KEY_ID..., AWS_WEB_IDENTITY_TOKEN_FILE, a credentials file), never from "
    "options."
)


@click.command(
    "audit", help=DESCRIPTION, epilog=OBJECT_STORAGE, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.argument("paths", nargs=-1, metavar="[PATH]...")
@click.option(
    "--from-cluster",
    metavar="URL,...",
    help="fetch GET /_history from these sidecar URLs (comma separated) instead of reading files",
)
@click.option(
    "--token-file",
    type=click.Path(path_type=Path),
    metavar="FILE",
    help="with --from-cluster: a file holding the bearer token sent to the sidecars (a reader token is "
    "enough); default: $COORDINATED_TOKEN",
)
@click.option(
    "--ca-file",
    type=click.Path(path_type=Path),
    metavar="FILE",
    help="with --from-cluster: the CA certificate(s) (PEM) that sign the sidecars' HTTPS certificates; "
    "default: $SSL_CERT_FILE, else the system's trust store",
)
@click.option(
    "--spark-master",
    default=None,
    help="Spark master (default local[*]; under spark-submit, the one spark-submit was given)",
)
@click.option(
    "--report-dir", default="reports", type=click.Path(path_type=Path), help="where the reports go (default: reports)"
)
@click.option("--format", type=click.Choice(["auto", "jsonl", "parquet"]), default="auto", help="input format")
@click.option("--skip-malformed", is_flag=True, help="count malformed lines instead of failing")
@click.option("--compact-to", metavar="DIR", help="also write the input as Parquet, by cluster and date")
@click.option("--max-examples", type=int, default=5, help="example events per violation")
@click.option("--max-violations", type=int, default=20, help="violations listed per invariant")
@click.option("--no-html", is_flag=True, help="write only audit-report.json")
@click.option(
    "--checkpoint",
    metavar="PATH",
    help="incremental: read this checkpoint if it exists, audit only what is newer, and write the new "
    "checkpoint there after the audit ran (exit 0 or 1); a file, or an s3://BUCKET/KEY object",
)
@click.option("--conf", multiple=True, metavar="KEY=VALUE", help="extra Spark settings")
@click.option("--s3-endpoint", metavar="URL", help="an S3-compatible service (default: $AWS_ENDPOINT_URL_S3, else AWS)")
@click.option("--s3-region", help="default: $AWS_REGION, else us-east-1")
@click.option(
    "--s3-path-style-access",
    type=click.Choice(["true", "false"]),
    help="address buckets as ENDPOINT/BUCKET (default: true with --s3-endpoint, false for AWS)",
)
@click.option(
    "--s3-credentials-file", metavar="FILE", help="an AWS credentials file (default: $AWS_SHARED_CREDENTIALS_FILE)"
)
def audit_command(paths: tuple[str, ...], conf: tuple[str, ...], **options: Any) -> int:
    return _audit(SimpleNamespace(paths=list(paths), conf=list(conf), **options))


def main(argv: list[str] | None = None) -> int:
    try:
        return run_program(audit_command, argv, "coordinated audit")
    except Exception as error:  # Spark or its JVM failed (out of memory, a lost task), or a bug: never violations
        return did_not_complete(error)


def _audit(args: SimpleNamespace) -> int:
    urls = [u.strip() for u in (args.from_cluster or "").split(",") if u.strip()]
    if not args.paths and not urls:
        print("coordinated audit: give history PATHs or --from-cluster URLs", file=sys.stderr)
        return EXIT_UNUSABLE
    if args.paths and urls:
        print("coordinated audit: give either PATHs or --from-cluster, not both", file=sys.stderr)
        return EXIT_UNUSABLE
    if args.checkpoint is not None and (urls or args.compact_to):
        print("coordinated audit: --checkpoint audits history files (PATHs), without --compact-to", file=sys.stderr)
        return EXIT_UNUSABLE
    conf = {}
    for kv in args.conf:
        key, sep, value = kv.partition("=")
        if not sep:
            print(f"coordinated audit: --conf {kv!r} is not KEY=VALUE", file=sys.stderr)
            return EXIT_UNUSABLE
        conf[key] = value

    # Imported here so that `coordinated audit --help` works without starting a JVM.
    from pyspark.sql import SparkSession

    from coordinated.audit import s3
    from coordinated.audit.reading import UnusableInput

    access = None
    if any(s3.is_s3(path) for path in [*args.paths, args.checkpoint or ""]):
        try:
            access = s3.S3Access.resolve(
                args.s3_endpoint,
                args.s3_region,
                None if args.s3_path_style_access is None else args.s3_path_style_access == "true",
                args.s3_credentials_file,
            )
            access.export_credentials_file()  # before the JVM starts: its AWS SDK reads it too
            conf = {**access.spark_conf(), **conf}
        except UnusableInput as e:
            print(f"coordinated audit: unusable input: {e}", file=sys.stderr)
            return EXIT_UNUSABLE

    from coordinated.audit import report
    from coordinated.audit.reading import load
    from coordinated.audit.run import audit
    from coordinated.audit.session import build_session

    had_session = SparkSession.getActiveSession() is not None
    spark = build_session(args.spark_master, conf)
    # Failures surface as one clear message below; Spark's own logging would add JVM stack traces.
    spark.sparkContext.setLogLevel("OFF")
    started = time.monotonic()
    inp = None
    held_back: dict[str, int] = {}
    checkpoint = None
    try:
        if args.checkpoint is not None:
            from coordinated.audit.checkpoint import Checkpoint, with_checkpoint

            checkpoint = (
                Checkpoint.read(Path(args.checkpoint))
                if access is None or not s3.is_s3(args.checkpoint)
                else s3.read_checkpoint(access, args.checkpoint, Checkpoint.parse)
            )
        if urls:
            from coordinated.audit.fetch import FetchAuth, load_from_cluster

            auth = FetchAuth.resolve(args.token_file, args.ca_file)
            inp = load_from_cluster(spark, urls, skip_malformed=args.skip_malformed, auth=auth)
        else:
            select = checkpoint.unread_files if checkpoint is not None else None
            paths, tails = (args.paths, None)
            if access is not None:
                paths, tails = s3.expand(spark, access, args.paths, select)
            inp = load(
                spark, paths, fmt=args.format, skip_malformed=args.skip_malformed, select=select, known_tails=tails
            )
            if checkpoint is not None:
                inp = with_checkpoint(spark, inp, checkpoint)
            if access is not None:
                from coordinated.audit.frontier import hold_back_unsettled

                inp.events, held_back = hold_back_unsettled(inp.events)
                if held_back:
                    inp.scout = None  # counted again over what is audited
        if args.compact_to:
            from coordinated.audit.compact import compact

            compact(spark, inp, args.compact_to)
            print(f"compacted to {args.compact_to}")
        outcome = audit(
            spark,
            inp,
            max_examples=args.max_examples,
            max_violations=args.max_violations,
            source=",".join(urls or args.paths),
            checkpoint=checkpoint,
            next_checkpoint=args.checkpoint is not None,
        )
    except UnusableInput as e:
        print(f"coordinated audit: unusable input: {e}", file=sys.stderr)
        return EXIT_UNUSABLE
    except Exception as e:  # a file Spark could not read (a cut .gz, a corrupt Parquet file) is unusable input
        where = unreadable_file(e)
        if where is None:
            raise
        print(f"coordinated audit: unusable input: cannot read {where}: {why_unreadable(e)}", file=sys.stderr)
        return EXIT_UNUSABLE
    finally:
        _clean_up(spark, inp, stop=not had_session)
    outcome.report["stats"]["input"]["archive_frontier"] = held_back
    charts = None
    if not args.no_html:
        from coordinated.audit.charts import render_all

        charts = render_all(outcome.charts)
    json_path, html_path = report.write(outcome.report, args.report_dir, charts)
    rep = outcome.report
    elapsed = time.monotonic() - started
    print(f"audited {rep['events']} events from {rep['nodes']} nodes in {elapsed:.1f}s")
    for name, count in rep["stats"]["violation_counts"].items():
        print(f"  {name:26} {'ok' if count == 0 else f'{count} VIOLATION(S)'}")
    if rep["malformed_lines"]:
        print(f"  {rep['malformed_lines']} malformed lines skipped")
    for t in rep["stats"]["input"]["truncated_lines"]:
        print(f"  note: truncated last line {t['source']}:{t['line']}")
    for r in rep.get("resets", []):
        print(
            f"  note: {r['type']} of node {r['node']} at {r['time (UTC)']} (seq {r['seq']}): cluster "
            f"{r['previous_cluster_uuid']} -> {r['cluster_uuid']}, (term, version) "
            f"{tuple(r['previous_term_version'])} -> {tuple(r['term_version'])}"
        )
    for cluster, version in held_back.items():
        print(
            f"  note: cluster {cluster}: events above version {version} are held back until the masters' archives "
            "reach them (a later run audits them)"
        )
    for m in rep.get("missing_histories", []):
        print(f"  note: no history in the input for node {m['node']}, which cluster {m['cluster']}'s states name")
    print(f"report: {json_path}" + (f" and {html_path}" if html_path else ""))
    if args.checkpoint is not None and outcome.checkpoint is not None:
        try:
            if access is not None and s3.is_s3(args.checkpoint):
                s3.write_object(access, args.checkpoint, outcome.checkpoint.to_text().encode())
            else:
                outcome.checkpoint.write(Path(args.checkpoint))
        except (UnusableInput, OSError) as e:
            print(f"coordinated audit: cannot write the checkpoint {args.checkpoint}: {e}", file=sys.stderr)
            return EXIT_UNUSABLE
        print(f"checkpoint: {args.checkpoint}")
    return EXIT_OK if rep["ok"] else EXIT_VIOLATIONS


def _clean_up(spark: SparkSession, inp: Input | None, *, stop: bool) -> None:
    """Release what the run cached and stop the session it started. A JVM that already died (the failure being
    reported) can do neither: that must not hide the failure's own message."""
    try:
        if inp is not None:
            inp.release()
        if stop:
            spark.stop()
    except Exception as error:
        print(f"coordinated audit: could not stop Spark cleanly: {what_failed(error)}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())

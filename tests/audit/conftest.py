"""Shared fixtures for the audit tests: one local SparkSession for the whole run, and small helpers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from coordinated.audit.reading import UnusableInput
from coordinated.audit.s3 import s3a_jars
from coordinated.audit.session import build_session


def _s3a_jars() -> dict[str, str]:
    """The s3a:// jars for the archive's tests (tests/audit/test_audit_s3.py fails, naming them, when they are
    missing); a session takes jars only when it starts."""
    try:
        jars = s3a_jars()
    except UnusableInput:
        return {}
    return {"spark.jars": ",".join(jars)} if jars else {}


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_session(
        "local[2]",
        {
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.ui.showConsoleProgress": "false",
            # Tiny data: compiling and re-planning cost far more than they save.
            "spark.sql.adaptive.enabled": "false",
            "spark.sql.codegen.wholeStage": "false",
            "spark.driver.memory": "1g",
            **_s3a_jars(),
        },
    )
    yield session
    session.stop()

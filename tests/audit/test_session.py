"""The local session's JVM: the settings build_session chooses for one machine reach the JVM it starts."""

from __future__ import annotations

from pyspark.sql import SparkSession

from coordinated.audit.session import LOCAL_JAVA_OPTIONS


def _collectors(spark: SparkSession) -> list[str]:
    beans = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()  # type: ignore[union-attr]
    return [str(bean.getName()) for bean in beans]


def test_a_local_audit_runs_on_the_parallel_collector(spark: SparkSession) -> None:
    # The parallel collector's beans are "PS Scavenge" and "PS MarkSweep"; G1 (the JVM's default) names its own.
    assert spark.conf.get("spark.driver.extraJavaOptions") == LOCAL_JAVA_OPTIONS
    names = _collectors(spark)
    assert any(name.startswith("PS ") for name in names), names
    assert not any("G1" in name for name in names), names

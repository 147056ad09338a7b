"""The jars Spark reads s3a:// with (spark-jobs/s3a/pom.xml, fetched by scripts/fetch-s3a-jars.sh): hadoop-aws for
exactly the Hadoop version pyspark bundles, and no second copy of a library pyspark's jars already hold."""

from __future__ import annotations

import re
from pathlib import Path

import pyspark
import pytest
from child_processes import ChildProcesses

from coordinated.audit.reading import UnusableInput
from coordinated.audit.s3 import s3a_jars

REPO = Path(__file__).resolve().parents[2]
BUNDLED = Path(pyspark.__file__).parent / "jars"


def artifact(jar: Path) -> str:
    return re.sub(r"-\d[\w.]*\.jar$", "", jar.name)


def test_the_jars_match_pysparks_hadoop_and_add_no_duplicate(processes: ChildProcesses) -> None:
    fetched = processes.run(
        ["bash", str(REPO / "scripts" / "fetch-s3a-jars.sh")], capture_output=True, text=True, timeout=900
    )
    assert fetched.returncode == 0, fetched.stderr
    folder = Path(fetched.stdout.strip())
    (hadoop_api,) = BUNDLED.glob("hadoop-client-api-*.jar")
    version = hadoop_api.name.removeprefix("hadoop-client-api-").removesuffix(".jar")
    assert (folder / f"hadoop-aws-{version}.jar").is_file()
    ours = {artifact(jar) for jar in folder.glob("*.jar")}
    assert not ours & {artifact(jar) for jar in BUNDLED.glob("*.jar")}, "a library would be on the classpath twice"
    assert not any(name == "bundle" for name in ours), "the AWS SDK's bundle jar (hundreds of MB) is not needed"


def test_a_pyspark_of_another_hadoop_is_refused(tmp_path: Path, processes: ChildProcesses) -> None:
    (tmp_path / "hadoop-client-api-9.9.9.jar").write_bytes(b"")
    refused = processes.run(
        ["bash", str(REPO / "scripts" / "fetch-s3a-jars.sh"), str(tmp_path)], capture_output=True, text=True
    )
    assert refused.returncode == 1 and "hold Hadoop [9.9.9]" in refused.stderr


def test_jars_in_sparks_own_folder_need_no_adding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under spark-submit (the image) pyspark is imported from a zip inside SPARK_HOME, whose jars folder holds
    hadoop-aws: nothing is added, and nothing is looked for in the cache."""
    (tmp_path / "jars").mkdir()
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    monkeypatch.setenv("COORDINATED_S3A_JARS", str(tmp_path / "nowhere"))
    with pytest.raises(UnusableInput, match=r"fetch-s3a-jars\.sh"):
        s3a_jars()
    (tmp_path / "jars" / "hadoop-aws-3.5.0.jar").write_bytes(b"")
    assert s3a_jars() == []

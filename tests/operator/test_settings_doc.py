"""docs/settings.md is generated from the settings registries and committed up to date; every rejection names
the setting it rejects."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinated.coordination.settings import SettingsError
from coordinated.operator import settings_doc
from coordinated.sidecar.config import sidecar_registry


def test_the_committed_doc_is_up_to_date() -> None:
    assert settings_doc.main(["--check"]) == 0, "run: python -m coordinated.operator.settings_doc"


def test_the_check_notices_a_stale_doc(tmp_path: Path) -> None:
    stale = tmp_path / "settings.md"
    stale.write_text(settings_doc.render().replace("cluster.publish.timeout", "cluster.publish.deadline"))
    assert settings_doc.main(["--check", "--output", str(stale)]) == 1
    assert settings_doc.main(["--output", str(stale)]) == 0
    assert settings_doc.main(["--check", "--output", str(stale)]) == 0


def test_every_registered_setting_is_documented_and_nothing_else() -> None:
    registered = {setting.name for setting in settings_doc.all_settings()}
    assert registered == set(settings_doc.MEANINGS)
    text = settings_doc.render()
    for name in registered:
        assert f"| `{name}` |" in text


@pytest.mark.parametrize("name", sorted(setting.name for setting in settings_doc.all_settings()))
def test_an_invalid_value_names_its_setting(name: str) -> None:
    with pytest.raises(SettingsError) as raised:
        sidecar_registry().parse_one(name, "not a value!")
    assert f"[{name}]" in str(raised.value)


@pytest.mark.parametrize("name", ["no.such.setting", *settings_doc.ZEN1_EXAMPLES, "discovery.zen.anything"])
def test_unknown_and_zen1_settings_name_the_setting(name: str) -> None:
    with pytest.raises(SettingsError) as raised:
        sidecar_registry().parse_one(name, "1")
    assert f"[{name}]" in str(raised.value)

"""docs/settings.md is generated from the settings registries and committed up to date; every rejection names
the setting it rejects."""

from __future__ import annotations

import pytest

from coordinated.coordination.settings import SettingsError
from coordinated.operator import generate, settings_doc
from coordinated.sidecar.node_settings import sidecar_registry


def test_the_committed_doc_is_up_to_date() -> None:
    assert generate.DOC.read_text() == settings_doc.render(), "run: python -m coordinated.operator.generate"


def test_every_registered_setting_is_documented_with_its_meaning_and_bounds() -> None:
    text = settings_doc.render()
    for setting in settings_doc.all_settings():
        assert setting.doc, f"[{setting.name}] has no meaning for docs/settings.md"
        row = next(line for line in text.splitlines() if line.startswith(f"| `{setting.name}` |"))
        assert setting.doc in row and (setting.value_type.bounds() or "-") in row
    assert "| `cluster.publish.timeout` | `30s` | 1s to 10m | no |" in text
    assert "| `cluster.metadata.max_state_size` | `256mb` | 1kb to 256mb | yes |" in text
    assert "Rule between settings: `cluster.election.max_timeout` must be at least" in text


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

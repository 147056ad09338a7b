from __future__ import annotations

from coordinated.coordination.reconfigurator import reconfigure
from coordinated.coordination.state import VotingConfiguration

config = VotingConfiguration.of


def test_grows_to_the_largest_odd_number_of_live_nodes() -> None:
    assert reconfigure(["a", "b"], [], "a", config(["a"])) == config(["a"])
    assert reconfigure(["a", "b", "c"], [], "a", config(["a"])) == config(["a", "b", "c"])
    assert reconfigure(["a", "b", "c", "d"], [], "a", config(["a", "b", "c"])) == config(["a", "b", "c"])
    assert len(reconfigure(list("abcde"), [], "a", config(["a", "b", "c"]))) == 5


def test_never_shrinks_below_three_with_auto_shrink() -> None:
    assert reconfigure(["a", "b"], [], "a", config(["a", "b", "c"])) == config(["a", "b", "c"])
    assert reconfigure(list("abc"), [], "a", config(list("abcde"))) == config(list("abc"))


def test_without_auto_shrink_keeps_the_current_members() -> None:
    current = config(list("abcde"))
    assert reconfigure(list("abc"), [], "a", current, auto_shrink=False) == current


def test_prefers_the_master_then_live_nodes_then_current_members() -> None:
    # Five live nodes, a seven-node config with two dead members: the dead ones go.
    result = reconfigure(list("abcde"), [], "e", config(list("abcdefg")))
    assert result == config(list("abcde"))
    assert "e" in reconfigure(list("abcde"), [], "e", config(list("abc")))


def test_excluded_nodes_leave_the_configuration() -> None:
    assert reconfigure(list("abcde"), ["e"], "a", config(list("abcde"))) == config(list("abc"))
    assert reconfigure(list("abc"), ["c"], "a", config(list("abc"))) == config(list("ab"))


def test_keeps_the_current_configuration_when_live_nodes_have_no_quorum_of_the_new_one() -> None:
    current = config(list("abcde"))
    # {a, b, c} would be the choice, but with only a live it cannot carry it: stay put.
    assert reconfigure(["a"], [], "a", current) == current
    # with a and b live, {a, b, c} has a live quorum and is adopted
    assert reconfigure(["a", "b"], [], "a", current) == config(list("abc"))

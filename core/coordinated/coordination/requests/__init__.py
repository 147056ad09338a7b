"""Every client request type of the core, each declared with what the core does with it (base.Action), one
domain per module: keys, transactions, sessions, cluster and snapshots. A new request is one type and one
`Action` in its domain's module (listed in its `ACTIONS`); everything else reads them from `ACTIONS` here: the
wire's union of request types (`AnyRequest`), the master's checks, routing, priorities and executors."""

from __future__ import annotations

import functools
import operator
from typing import TYPE_CHECKING, Any

from coordinated.coordination.client import ClientRequest
from coordinated.coordination.requests import cluster, keys, sessions, snapshots, transactions
from coordinated.coordination.requests.base import Action
from coordinated.coordination.settings import Settings
from coordinated.coordination.state import ClusterState

DOMAINS = (keys, transactions, sessions, cluster, snapshots)
ACTIONS: dict[type[ClientRequest[Any]], Action[Any]] = {
    action.request: action for domain in DOMAINS for action in domain.ACTIONS
}
if len(ACTIONS) != sum(len(domain.ACTIONS) for domain in DOMAINS):
    raise ValueError("a request type has two Actions")

if TYPE_CHECKING:
    AnyRequest = ClientRequest[Any]
else:
    # The tagged union a peer's forwarded request is decoded as: every registered type, by its tag.
    AnyRequest = functools.reduce(operator.or_, ACTIONS)


def action_of(request: ClientRequest[Any]) -> Action[Any]:
    return ACTIONS[type(request)]


def request_problem(request: ClientRequest[Any], state: ClusterState, settings: Settings) -> str | None:
    """The master's check of any client request against its current state and settings."""
    return action_of(request).validate(request, state, settings)

"""`GroupMember` and `AsyncGroupMember`: group membership over sessions, with a live view of the members
(Curator's `GroupMember`); written once as flows.

A member is an ephemeral key of its session under `name/`, named by the member's id, its value the member's
data. It leaves when it calls `leave()`, or when its session ends (it crashed, was partitioned past its TTL,
or its node left). `members()` reads the group now; `watch_members()` yields the whole group, then again
after every change, from one stream: a change is never missed, and the view is always one state's.
"""

from __future__ import annotations

import contextlib
from typing import Any

from coordinated.client import operations
from coordinated.client.aio import AsyncClient, AsyncRecipe, AsyncSession
from coordinated.client.calls import checked_key
from coordinated.client.errors import NotFound
from coordinated.client.flow import (
    Emit,
    Flow,
    Stream,
    awaiting,
    awaiting_stream,
    blocking,
    blocking_stream,
    next_item,
)
from coordinated.client.recipes.base import C, S, SessionRecipe, require_live_session
from coordinated.client.sync import BlockingRecipe, Client, Session

Members = dict[str, Any]  # member id -> its data


class GroupMemberBase(SessionRecipe[C, S]):
    """Member `member_id` of the group `name`, through `session`, with `data` for the others to read."""

    def __init__(self, client: C, name: str, session: S, member_id: str, data: Any = None) -> None:
        super().__init__(client, session)
        self.name = checked_key(name)
        self.prefix = self.name + "/"
        self.member_id = member_id
        self.key = checked_key(self.prefix + member_id)
        self.data = data

    def joined(self) -> bool:
        """This client's belief: joined, and the session `connected`."""
        return self._joined and self.connected()

    _joined = False


def join(member: GroupMemberBase[Any, Any], data: Any = None) -> Flow[None]:
    """Joins the group (or updates this member's data, if given)."""
    require_live_session(member.session)
    if data is not None:
        member.data = data
    yield from operations.put(member.client, member.key, member.data, session=member.session.id)
    member._joined = True


def leave(member: GroupMemberBase[Any, Any]) -> Flow[None]:
    member._joined = False
    with contextlib.suppress(NotFound):
        yield from operations.delete(member.client, member.key)


def _view(member: GroupMemberBase[Any, Any], keys: dict[str, Any]) -> Members:
    return {key.removeprefix(member.prefix): value for key, value in sorted(keys.items())}


def members(member: GroupMemberBase[Any, Any]) -> Flow[Members]:
    """The members now (a linearizable read): id -> data."""
    listing = yield from operations.list_prefix(member.client, member.prefix)
    return _view(member, listing.values())


def watch_members(member: GroupMemberBase[Any, Any]) -> Stream[Members]:
    """The members now, then the whole group again after every change, for ever."""
    listing = yield from operations.list_prefix(member.client, member.prefix)
    current = listing.values()
    yield Emit(_view(member, current))
    # Every change after the listing's version, resumed through any node; a reset (the stream fell behind)
    # is followed by a put of every key there.
    watch = operations.watch(member.client, member.prefix, listing.version)
    try:
        while True:
            event = yield from next_item(watch)
            if event.type == "reset":
                current = {}
            elif event.type == "put":
                current[event.key] = event.value
            else:
                current.pop(event.key, None)
            yield Emit(_view(member, current))
    finally:
        watch.close()


class GroupMember(GroupMemberBase[Client, Session], BlockingRecipe):
    __doc__ = GroupMemberBase.__doc__
    join = blocking(join)
    leave = blocking(leave)
    members = blocking(members)
    watch_members = blocking_stream(watch_members)


class AsyncGroupMember(GroupMemberBase[AsyncClient, AsyncSession], AsyncRecipe):
    __doc__ = GroupMemberBase.__doc__
    join = awaiting(join)
    leave = awaiting(leave)
    members = awaiting(members)
    watch_members = awaiting_stream(watch_members)

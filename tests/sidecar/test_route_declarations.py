"""The declarations of the client API's routes (web/routes.py): each says what its requests need, the privilege
and where a request names its keys, in a way the access check reads off the declaration alone."""

from __future__ import annotations

import itertools

from aiohttp.test_utils import make_mocked_request

from coordinated.sidecar.web.privileges import BUILT_IN_ROLES, Privilege, Role, role_for
from coordinated.sidecar.web.route_table import ENDPOINTS
from coordinated.sidecar.web.routes import KeysFrom, KeyTarget, requested_keys

KEY_PRIVILEGES = {Privilege.READ, Privilege.WRITE}


def test_a_route_with_a_key_privilege_says_where_its_keys_are_and_no_other_route_names_keys() -> None:
    for endpoint in ENDPOINTS:
        route = endpoint.route
        assert (route.keys is not KeysFrom.NONE) == (route.privilege in KEY_PRIVILEGES), (route.methods, route.path)
        if route.keys is KeysFrom.PATH:
            assert route.path_params == ("key",), route.path
        if route.keys is KeysFrom.PREFIX:
            assert "prefix" in {param.name for param in route.params}, route.path


def test_the_keys_of_a_request_as_its_route_names_them() -> None:
    def request(path: str) -> object:
        return make_mocked_request("GET", path)

    assert requested_keys(KeysFrom.PATH, request("/_cluster/metadata/locks/a%2Fb")) == (KeyTarget("locks/a/b", False),)
    watch = request("/_cluster/metadata/_watch?stream=true&prefix=a/&prefix=b/")
    assert requested_keys(KeysFrom.PREFIX, watch) == (KeyTarget("a/", True), KeyTarget("b/", True))
    assert requested_keys(KeysFrom.PREFIX, request("/_cluster/metadata")) == (KeyTarget("", True),)
    assert requested_keys(KeysFrom.ALL, request("/_cluster/state")) == (KeyTarget("", True),)
    assert requested_keys(KeysFrom.NONE, request("/_cluster/health")) == ()
    assert requested_keys(KeysFrom.BODY, request("/_cluster/metadata/_txn")) is None


def test_each_built_in_role_holds_what_the_one_before_it_holds_and_a_privilege_needs_the_lowest() -> None:
    roles = sorted(BUILT_IN_ROLES)
    assert all(BUILT_IN_ROLES[low] < BUILT_IN_ROLES[high] for low, high in itertools.pairwise(roles))
    assert BUILT_IN_ROLES[Role.ADMIN] == frozenset(Privilege)
    assert [role_for(privilege) for privilege in Privilege] == [
        Role.OPEN,  # none
        Role.READER,  # monitor
        Role.READER,  # read
        Role.WRITER,  # write
        Role.WRITER,  # session
        Role.ADMIN,  # manage
    ]

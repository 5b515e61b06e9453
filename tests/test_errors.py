"""splitrpc.errors against the C core: each error class's name is srpc_strerror(code), and a server's error and drop counters keep their names."""
import pytest

import splitrpc
from splitrpc import errors
from splitrpc._native import lib, strerror

# The keys of Server.stats()["drops"] (public: metrics labels, dashboards); named by srpc_drop_name.
DROP_KEYS = ["short", "bad_header", "bad_segment", "truncated", "not_request", "inconsistent", "reassembly_timeout",
             "memory_cap", "table_full", "duplicate", "rejected", "tx_failed", "not_allowed", "bad_check",
             "client_memory_cap", "bad_data_check", "auth_missing", "auth_unknown_key", "auth_bad_tag", "auth_stale",
             "auth_replay", "auth_no_room", "auth_v4_off", "auth_address"]


@pytest.mark.parametrize("cls", list(errors.ERROR_CLASSES.values()), ids=lambda c: c.__name__)
def test_error_class_name_is_the_c_name(cls):
    assert errors.ERROR_CLASSES[cls.code] is cls
    assert cls.name == strerror(cls.code)
    assert isinstance(errors.remote_error(cls.code, b"why"), cls)


def test_every_wire_error_code_has_a_class():
    assert sorted(errors.ERROR_CLASSES) == list(range(1, lib.SRPC_E_MAX))


def test_unknown_code_is_a_plain_remote_error():
    e = errors.remote_error(lib.SRPC_E_MAX, "later")
    assert type(e) is splitrpc.RemoteError and e.code == lib.SRPC_E_MAX


def test_stats_names_errors_and_drops_as_before(builtin_server):
    st = builtin_server.stats()
    assert list(st["errors"]) == [c.name for c in errors.ERROR_CLASSES.values()]
    assert list(st["drops"]) == DROP_KEYS

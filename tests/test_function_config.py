"""FunctionConfig (issue 54): one dataclass carries every per-function setting from the decorator to the C core, so a setting is added in one Python place (a field) and one C place (srpc_func_config_t); the scheduling policies are the C core's one list."""
import dataclasses
import inspect
import threading

import numpy as np
import pytest

import splitrpc
from splitrpc import FunctionConfig, Server, TensorSpec
from splitrpc._native import ffi, lib
from splitrpc._native import server as _server

VEC = TensorSpec("x", "float32", (4,))


def test_the_decorator_and_add_function_name_no_setting_of_their_own():
    """The settings live in FunctionConfig only: neither entry point lists one."""
    for entry in (Server.function, Server.add_function):
        params = inspect.signature(entry).parameters
        fields = {f.name for f in dataclasses.fields(FunctionConfig)}
        assert not fields & set(params), f"{entry.__name__} repeats settings: {sorted(fields & set(params))}"
        assert any(p.kind is p.VAR_KEYWORD for p in params.values())


def test_every_field_copied_to_c_names_a_field_of_srpc_func_config_t():
    c_fields = {name for name, _ in ffi.typeof("srpc_func_config_t").fields}
    copied = {f.metadata["c"] for f in dataclasses.fields(FunctionConfig) if "c" in f.metadata}
    assert copied and copied <= c_fields, copied - c_fields
    full = FunctionConfig(max_batch=3, max_delay_us=7, capacity=64, priority=5, weight=2, cost="aux",
                          max_batch_cost=9)
    assert full.c_fields() == {"max_batch": 3, "max_delay_us": 7, "capacity": 64, "priority": 5, "weight": 2,
                               "max_batch_cost": 9}
    assert FunctionConfig().c_fields() == {}  # None: the C core's default is kept


def _f(x, y):
    y[:] = x


def test_a_bad_setting_fails_at_the_decorator_and_an_unknown_one_is_named():
    srv = Server("127.0.0.1", 0)
    try:
        with pytest.raises(ValueError, match="max_batch and capacity"):
            srv.function(1, "f", [VEC], [VEC], max_batch=0)(_f)
        with pytest.raises(ValueError, match="cost_classes needs a cost"):
            srv.function(1, "f", [VEC], [VEC], cost_classes=(10,))(_f)
        with pytest.raises(TypeError, match="max_bach"):
            srv.function(1, "f", [VEC], [VEC], max_bach=4)(_f)
        with pytest.raises(TypeError, match="config must be a splitrpc.FunctionConfig"):
            srv.function(1, "f", [VEC], [VEC], config={"max_batch": 4})(_f)
        with pytest.raises(ValueError, match="orchestration"):
            FunctionConfig(orchestration="o3")
        assert FunctionConfig(cost="aux", cost_classes=[5, 50], class_spill=[3, 0]).n_classes == 3
        assert not srv.functions() or all(f.func_id != 1 for f in srv.functions())
    finally:
        srv.close()


def test_one_shot_iterators_are_read_once_and_the_server_state_is_checked_first():
    """A generator for cost_classes or class_spill is read once (a config replaced by more keywords
    keeps the values), and after start() any registration fails as before: SplitRPCError first."""
    cfg = FunctionConfig(cost="aux", cost_classes=(b for b in [10, 100]), class_spill=iter([4, 0]))
    again = FunctionConfig.of(cfg, priority=2)
    assert again.cost_classes == (10, 100) and again.class_spill == (4, 0) and again.n_classes == 3
    srv = Server("127.0.0.1", 0, wait="block")
    srv.function(1, "f", [VEC], [VEC], cost="aux", cost_classes=(b for b in [10, 100]))(_f)
    srv.start()
    try:
        with pytest.raises(splitrpc.SplitRPCError, match="before the server starts"):
            srv.function(2, "g", [VEC], [VEC], max_batch=0)(_f)
    finally:
        srv.stop()


def test_the_old_home_of_the_defaults_still_answers_for_one_release():
    import splitrpc.defaults as old
    from splitrpc.client import CLIENT_DEFAULTS
    from splitrpc.function_config import FUNCTION_DEFAULTS
    from splitrpc.server import SERVER_DEFAULTS

    for name, value in (("SERVER_DEFAULTS", SERVER_DEFAULTS), ("FUNCTION_DEFAULTS", FUNCTION_DEFAULTS),
                        ("CLIENT_DEFAULTS", CLIENT_DEFAULTS)):
        with pytest.warns(DeprecationWarning, match=f"moved to .*{name}"):
            assert getattr(old, name) is value
    with pytest.raises(AttributeError):
        old.NOTHING


def test_a_config_object_reaches_the_c_core_and_survives_a_rebuild(make_client):
    """max_batch=3 from a FunctionConfig bounds the batches the callback sees under 16 calls
    outstanding, describe reports it, and rebuild() keeps it; keywords given with config= win."""
    cfg = FunctionConfig(max_batch=3, max_delay_us=2000, version="v7")
    sizes: list[int] = []
    lock = threading.Lock()

    srv = Server("127.0.0.1", 0, wait="block")

    @srv.function(1, "double", [VEC], [VEC], config=cfg, priority=4)
    def double(x, out):
        with lock:
            sizes.append(len(x))
        out[:] = 2 * x

    srv = srv.rebuild()
    srv.start()
    try:
        info = {f.name: f for f in srv.functions()}["double"]
        assert (info.max_batch, info.priority, info.version) == (3, 4, "v7")
        c = make_client(srv.port, timeout=10.0)
        x = np.arange(4, dtype=np.float32)
        futs = [c.call_async(1, x) for _ in range(64)]
        for f in futs:
            assert np.array_equal(np.frombuffer(f.result(), np.float32), 2 * x)
        assert sizes and max(sizes) <= 3, sizes
        assert sum(sizes) == 64
    finally:
        srv.stop()


def test_the_scheduling_policies_are_the_c_cores_list():
    assert list(_server.SCHED_POLICIES) == ["rr", "priority", "fair", "edf"]
    assert all(_server.SCHED_POLICIES[ffi.string(lib.srpc_sched_name(v)).decode()] == v
               for v in _server.SCHED_POLICIES.values())
    assert lib.srpc_sched_name(lib.SRPC_SCHED_MAX) == ffi.NULL and lib.srpc_sched_name(-1) == ffi.NULL
    assert splitrpc.server.SCHED_POLICIES is _server.SCHED_POLICIES

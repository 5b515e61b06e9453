"""function_config.py: FunctionConfig, every setting of one served function (batching, queues, raw sizes, device, executor, deadline, cost, scheduling, classes, version) in one dataclass with its checks: `Server.function(...)` and `Server.add_function(...)` build one from their keywords, and the binding (`splitrpc/_native/server.py`) copies it into the C core's `srpc_func_config_t`.

Adding a per-function setting takes one Python place (a field here, with its check in
`__post_init__`) and one C place (its field in `srpc_func_config_t`, native/include/splitrpc_server.h,
used in native/src/server/function.c): a field whose metadata names a C field (`_c("name")`) is
copied as it is when it is not None, where None keeps the C core's default (srpc_func_config_init).
Settings that need the callback or the server to be checked (an ``async def`` callback's
``per_call``, a GPU's presence, tensor specs against ``raw``) are checked by `Server.add_function`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterable

from splitrpc import cost as cost_
from splitrpc import gpu
from splitrpc.cost import CostTable
from splitrpc._native import server as _server

# A function's defaults as the C core sets them (srpc_func_config_init; the numbers live in
# native/src/core/tunables.h): capacity, max_batch, max_delay_us, priority, weight. Read-only.
FUNCTION_DEFAULTS = _server.FUNCTION_DEFAULTS


def _c(name: str, default: Any = None) -> Any:
    """A field copied into srpc_func_config_t's field `name` as it is (None: the C default)."""
    return field(default=default, metadata={"c": name})


def class_bounds(cost_classes: Iterable[int]) -> tuple[int, ...]:
    """cost_classes checked: a tuple of 1 .. MAX_CLASS_BOUNDS strictly ascending integers from 1 to
    2**32 - 1 (a call's cost is at most that); ValueError saying what is wrong otherwise."""
    try:
        b = tuple(cost_classes)
    except TypeError:
        raise ValueError(f"cost_classes must be a sequence of cost bounds, got {cost_classes!r}") from None
    if not 1 <= len(b) <= _server.MAX_CLASS_BOUNDS:
        raise ValueError(f"cost_classes holds 1 to {_server.MAX_CLASS_BOUNDS} bounds (2 to "
                         f"{_server.MAX_CLASS_BOUNDS + 1} classes), got {len(b)}")
    for i, v in enumerate(b):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v < 2**32:
            raise ValueError(f"cost_classes[{i}] must be an integer from 1 to 2**32 - 1, got {v!r}")
        if i and v <= b[i - 1]:
            raise ValueError(f"cost_classes must be strictly ascending, got {list(b)}")
    return b


def class_spill(spill: Iterable[int] | None, bounds: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """class_spill checked against the cost classes' bounds: None, or one integer from 0 to
    2**32 - 1 per class but the last; ValueError saying what is wrong otherwise."""
    if spill is None:
        return None
    if bounds is None:
        raise ValueError("class_spill moves calls between cost classes: give cost_classes with it")
    try:
        n = tuple(spill)
    except TypeError:
        raise ValueError(f"class_spill must be a sequence of call counts, got {spill!r}") from None
    if len(n) != len(bounds):
        raise ValueError(f"class_spill holds one limit per class but the last ({len(bounds)}), got {len(n)}")
    for i, v in enumerate(n):
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**32:
            raise ValueError(f"class_spill[{i}] must be an integer from 0 (never) to 2**32 - 1, got {v!r}")
    return n


@dataclass(frozen=True)
class FunctionConfig:
    """A served function's settings; `Server.function`'s docstring says what each does. None
    takes the C core's default (FUNCTION_DEFAULTS); a raw function's
    max_request and max_response left None are the server's max_message."""
    max_batch: int | None = _c("max_batch")        # calls per batch at most
    max_delay_us: int | None = _c("max_delay_us")  # how long a batch may wait for more calls
    capacity: int | None = _c("capacity")          # elements per Tensor Queue
    raw: bool = False                              # bytes in, bytes out (no tensor specs)
    max_request: int | None = None                 # a raw function's largest request
    max_response: int | None = None                # a raw function's largest reply
    device: str = "cpu"                            # "cpu" or "cuda:N"
    orchestration: str = "o1"                      # "o1", "graph" or "o2" (GPU functions)
    deadline: float | None = None                  # seconds a call may wait queued (DEADLINE after)
    executor: Any = "inline"                       # "inline", a thread count, or a splitrpc.ThreadPool
    cost: Any = None                               # None, "aux" or a splitrpc.CostTable
    max_batch_cost: int | None = _c("max_batch_cost")  # a batch's summed admission cost at most
    priority: int | None = _c("priority")          # sched="priority": higher first
    weight: int | None = _c("weight")              # sched="fair": its share
    aux_classes: int | None = None                 # 2 .. 16 queues by the header's aux
    cost_classes: Iterable[int] | None = None      # queues by admission cost: their bounds
    class_spill: Iterable[int] | None = None       # per cost class but the last: calls before spilling
    version: str | None = None                     # what describe reports for it
    per_call: bool = False                         # an async def function awaited once per call
    # Derived by the checks (not settings): the cost classes' bounds and spill limits as tuples,
    # and the number of queues by class (0: one queue).
    bounds: tuple[int, ...] | None = field(default=None, init=False, repr=False, compare=False)
    spill: tuple[int, ...] | None = field(default=None, init=False, repr=False, compare=False)
    n_classes: int = field(default=0, init=False, repr=False, compare=False)

    @classmethod
    def of(cls, config: "FunctionConfig | None" = None, **settings: Any) -> "FunctionConfig":
        """config (or the defaults) with settings replacing its fields; TypeError names a
        keyword that is not a setting."""
        if config is not None and not isinstance(config, FunctionConfig):
            raise TypeError(f"config must be a splitrpc.FunctionConfig, got {type(config).__name__}")
        names = {f.name for f in dataclasses.fields(cls) if f.init}
        unknown = sorted(set(settings) - names)
        if unknown:
            raise TypeError(f"not a function setting: {', '.join(unknown)} (splitrpc.FunctionConfig's fields: "
                            f"{', '.join(sorted(names))})")
        if config is None:
            return cls(**settings)
        return dataclasses.replace(config, **settings) if settings else config

    def settings(self) -> dict[str, Any]:
        """The settings as keywords (of(**settings()) makes the same config)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}

    def c_fields(self) -> dict[str, Any]:
        """The settings copied into srpc_func_config_t as they are: C field -> value, None left out."""
        return {f.metadata["c"]: getattr(self, f.name) for f in dataclasses.fields(self)
                if "c" in f.metadata and getattr(self, f.name) is not None}

    def __post_init__(self) -> None:
        if (self.max_batch is not None and self.max_batch < 1) or (self.capacity is not None and self.capacity < 1):
            raise ValueError("max_batch and capacity must be at least 1")
        if self.deadline is not None and not 0 < self.deadline <= 4000:
            raise ValueError(f"deadline must be a positive number of seconds (at most 4000), got {self.deadline!r}")
        if self.version is not None and (not isinstance(self.version, str) or len(self.version) > 64):
            raise ValueError(f"version must be a string of at most 64 characters, got {self.version!r}")
        if self.orchestration not in gpu.ORCHESTRATIONS:
            raise ValueError(f"orchestration must be one of {gpu.ORCHESTRATIONS}, got {self.orchestration!r}")
        cost = self.cost
        if cost is not None and cost != cost_.AUX and not isinstance(cost, CostTable):
            raise ValueError(f"cost must be None, 'aux' or a splitrpc.CostTable, got {cost!r}")
        if self.max_batch_cost is not None and (isinstance(self.max_batch_cost, bool)
                                                or not isinstance(self.max_batch_cost, int)
                                                or not 1 <= self.max_batch_cost < 2**64):
            raise ValueError(f"max_batch_cost must be a positive integer, got {self.max_batch_cost!r}")
        for what in ("priority", "weight"):
            v = getattr(self, what)
            if v is not None:
                if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**32:
                    raise ValueError(f"{what} must be an integer from 0 to 2**32 - 1, got {v!r}")
        aux = self.aux_classes
        if aux is not None and (isinstance(aux, bool) or not isinstance(aux, int)
                                or not 1 <= aux <= _server.MAX_AUX_CLASSES):
            raise ValueError(f"aux_classes must be an integer from 1 to {_server.MAX_AUX_CLASSES}, got {aux!r}")
        n_classes = 0 if aux in (None, 1) else aux
        bounds = None
        if self.cost_classes is not None:
            bounds = class_bounds(self.cost_classes)
            if aux is not None:
                raise ValueError("aux_classes and cost_classes both give the function its queues: choose one")
            if cost is None:
                raise ValueError("cost_classes needs a cost ('aux' or a CostTable): a call's class is its cost's range")
            n_classes = len(bounds) + 1
        spill = class_spill(self.class_spill, bounds)
        if n_classes and cost == cost_.AUX and bounds is None:
            raise ValueError("aux_classes and cost='aux' both read the request header's aux: choose one")
        if self.max_batch_cost is not None and cost is None:
            raise ValueError("max_batch_cost needs a cost ('aux' or a CostTable)")
        # The sequences as the tuples checked: an iterator given is read once, and a config
        # replaced (dataclasses.replace runs these checks again) reads the same values.
        if self.cost_classes is not None:
            object.__setattr__(self, "cost_classes", bounds)
        if self.class_spill is not None:
            object.__setattr__(self, "class_spill", spill)
        object.__setattr__(self, "bounds", bounds)
        object.__setattr__(self, "spill", spill)
        object.__setattr__(self, "n_classes", n_classes)

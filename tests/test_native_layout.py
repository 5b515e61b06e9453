"""The native core's structure, read from its sources: no two files of native/src call each other in a circle (a .c and its .h are one unit), every file says what it is for on its first line, the server core's and the client's calls run one way, and no file is longer than 600 lines."""
import pathlib
import re

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "native" / "src"

# A function defined at file scope (static or not): its name is followed by its parameter list
# (which may wrap) and the opening brace of its body.
_DEF = re.compile(r"^(?!typedef\b)(?!#)[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\([^;{}()]*(?:\([^()]*\)[^;{}()]*)*\)\s*"
                  r"(?:__attribute__\s*\(\([^)]*\)\)\s*)?\{", re.M)
_CALL = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
# A prototype at file scope (a declaration, not a call).
_PROTO = re.compile(r"^(?!return\b)[A-Za-z_][\w \t\*]*?\b[A-Za-z_]\w*\s*\([^;{}()]*(?:\([^()]*\)[^;{}()]*)*\)\s*"
                    r"(?:__attribute__\s*\(\(.*?\)\)\s*)?;", re.M | re.S)
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_STRING = re.compile(r'"(?:\\.|[^"\\])*"')


def _strip(text: str) -> str:
    return _STRING.sub('""', _COMMENT.sub(" ", text))


def _units() -> dict[str, list[pathlib.Path]]:
    units: dict[str, list[pathlib.Path]] = {}
    for p in sorted(SRC.rglob("*.[ch]")):
        units.setdefault(str(p.relative_to(SRC).with_suffix("")), []).append(p)
    return units


def _graph() -> tuple[dict[str, set[str]], dict[tuple[str, str], set[str]]]:
    """unit -> units it calls, and the names behind each edge."""
    units = _units()
    # What a unit calls: its text without its prototypes and its definitions' own signatures.
    text = {u: "\n".join(_DEF.sub("{", _PROTO.sub(";", _strip(p.read_text()))) for p in ps)
            for u, ps in units.items()}
    defined: dict[str, str] = {}
    static: dict[str, set[str]] = {}
    for u, ps in units.items():
        for p in ps:
            body = _strip(p.read_text())
            for m in _DEF.finditer(body):
                name = m.group(1)
                line = body[m.start():body.find("\n", m.start())]
                if re.match(r"\s*static\b(?!\s+inline)", line):
                    static.setdefault(u, set()).add(name)  # file-local: never an edge
                elif name not in defined:
                    defined[name] = u
    edges: dict[str, set[str]] = {u: set() for u in units}
    names: dict[tuple[str, str], set[str]] = {}
    for u, t in text.items():
        for m in _CALL.finditer(t):
            name = m.group(1)
            v = defined.get(name)
            if v is None or v == u or name in static.get(u, ()):
                continue
            edges[u].add(v)
            names.setdefault((u, v), set()).add(name)
    return edges, names


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one unit (Tarjan)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_the_reader_sees_the_calls_it_must():
    """The check below is only as good as the graph: known calls must be in it."""
    edges, names = _graph()
    assert "server/callring" in edges["server/admit"], names
    assert "srpc_ring_fill_locked" in names[("server/admit", "server/callring")]
    assert "srpc_admit_new_rx" in names[("server/datagram", "server/admit")]
    assert "server/engine" in edges["server/rx_owner"]
    assert "transport/udp" in edges["transport/open"]
    assert "transport/faults" in edges["transport/udp_inject"]
    assert "srpc_udp_send_socket" in names[("transport/udp_tx", "transport/udp_sock")]
    assert "cl_finish" in names[("client/replies", "client/finish")]
    assert "client/client_state" in edges["client/calls"]


def test_no_two_files_call_each_other_in_a_circle():
    edges, names = _graph()
    cycles = _cycles(edges)
    why = []
    for comp in cycles:
        for u in comp:
            for v in comp:
                if (u, v) in names:
                    why.append(f"{u} -> {v}: {', '.join(sorted(names[(u, v)]))}")
    assert not cycles, "circles between files of native/src:\n" + "\n".join(why)


# The server core's layers, from the wire up: a file may call files of its own layer's
# leaves and of lower layers only (calls run down on receive and down again on reply).
_SERVER_LAYERS = [
    {"server/calltab", "server/srcmem", "server/allowlist", "server/keytab", "server/session_table"},
    {"server/sessions"},
    {"server/callring"},
    {"server/partial", "server/reply", "server/gpu_rx", "server/cost", "server/sched"},
    {"server/admit", "server/batcher", "server/completion", "server/function"},
    {"server/datagram"},
    {"server/rx_in_place"},
    {"server/engine"},
    {"server/rx_owner", "server/gpu_batch"},
    {"server/next_batch"},
    {"server/server"},
]


@pytest.mark.parametrize("layer", range(len(_SERVER_LAYERS)))
def test_server_calls_run_one_way(layer):
    edges, names = _graph()
    rank = {u: i for i, units in enumerate(_SERVER_LAYERS) for u in units}
    assert set(rank) == {u for u in edges if u.startswith("server/") and u != "server/server_state"}, \
        "every server file has a layer"
    for u in _SERVER_LAYERS[layer]:
        up = [f"{u} -> {v} ({', '.join(sorted(names[(u, v)]))})" for v in edges[u] if rank.get(v, -1) > layer]
        assert not up, "calls up the server's layers:\n" + "\n".join(up)


# The client's files, from its state up (client_state.h says which file does what): as the
# server's, a file calls its own layer's leaves and lower layers only.
_CLIENT_LAYERS = [
    {"client/client_state", "client/sessions", "client/schedule"},
    {"client/finish"},
    {"client/call_auth"},
    {"client/retransmit", "client/flow"},
    {"client/replies"},
    {"client/calls"},
    {"client/client"},
    {"client/client_load", "client/client_lib"},
]


@pytest.mark.parametrize("layer", range(len(_CLIENT_LAYERS)))
def test_client_calls_run_one_way(layer):
    edges, names = _graph()
    rank = {u: i for i, units in enumerate(_CLIENT_LAYERS) for u in units}
    assert set(rank) == {u for u in edges if u.startswith("client/")}, "every client file has a layer"
    for u in _CLIENT_LAYERS[layer]:
        up = [f"{u} -> {v} ({', '.join(sorted(names[(u, v)]))})" for v in edges[u] if rank.get(v, -1) > layer]
        assert not up, "calls up the client's layers:\n" + "\n".join(up)


def test_no_native_file_is_longer_than_one_concern():
    """Issue 54's bound: a file past 600 lines holds more than one concern (the client, the
    server's receive path, the transports and version 5's sessions were split by it)."""
    over = {str(p.relative_to(SRC)): n for p in sorted(SRC.rglob("*.[ch]"))
            if (n := len(p.read_text().splitlines())) > 600}
    assert not over, f"native files over 600 lines (split them by concern): {over}"


# Kernel UDP and DPDK, from the socket or port up to the transport: one way as well.
_TRANSPORT_LAYERS = [
    {"transport/faults", "transport/transport", "dpdk/frame", "dpdk/dpdk_payload_pool", "dpdk/dpdk_split_emulation"},
    {"transport/udp_sock", "dpdk/dpdk_port"},
    {"transport/udp_inject", "dpdk/dpdk_tx"},
    {"transport/udp_rx", "transport/udp_tx", "dpdk/dpdk_rx"},
    {"transport/udp", "dpdk/transport_dpdk"},
    {"transport/open"},
]


@pytest.mark.parametrize("layer", range(len(_TRANSPORT_LAYERS)))
def test_transport_calls_run_one_way(layer):
    edges, names = _graph()
    rank = {u: i for i, units in enumerate(_TRANSPORT_LAYERS) for u in units}
    assert {u for u in edges if u.startswith(("transport/udp", "dpdk/dpdk_port", "dpdk/dpdk_rx", "dpdk/dpdk_tx",
                                             "dpdk/transport_dpdk"))} <= set(rank), "every transport file has a layer"
    for u in _TRANSPORT_LAYERS[layer]:
        up = [f"{u} -> {v} ({', '.join(sorted(names[(u, v)]))})" for v in edges[u] if rank.get(v, -1) > layer]
        assert not up, "calls up the transports' layers:\n" + "\n".join(up)


def test_every_file_says_what_it_is_for():
    missing = []
    for p in sorted(SRC.rglob("*.[ch]")):
        first = p.read_text().lstrip().splitlines()[0]
        if not re.match(r"/\* %s: \S" % re.escape(p.name), first):
            missing.append(str(p.relative_to(SRC)))
    assert not missing, "no purpose line (/* name.c: what it is for */): " + ", ".join(missing)


# Below the client and the server: what each folder of native/src may call besides itself. A
# transport calls the core (the wire, checks, sessions) and its fault injectors beside it; the
# client calls the transports and the core; nothing there calls up into tools/, server/ or client/.
_MAY_CALL = {
    "transport": {"core", "dpdk"},  # open.c picks the DPDK transport where it is built in
    "client": {"core", "transport"},
    "core": set(),
}


@pytest.mark.parametrize("folder", sorted(_MAY_CALL))
def test_transports_and_the_client_call_one_way(folder):
    edges, names = _graph()
    allowed = _MAY_CALL[folder] | {folder}
    up = [f"{u} -> {v} ({', '.join(sorted(names[(u, v)]))})" for u in edges if u.startswith(folder + "/")
          for v in edges[u] if v.split("/")[0] not in allowed]
    assert not up, f"native/src/{folder} calls outside what it may:\n" + "\n".join(up)

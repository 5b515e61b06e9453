"""The example capability (examples/capability, issue 54): installed as a package of its own (pip install --target, on PYTHONPATH), it brings a command, a served function with its metric, a check section and a benchmark suite, and splitrpc's own files name none of it."""
import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from conftest import read_until

import splitrpc

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "capability"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                        "--target", str(site), str(EXAMPLE)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (site / "splitrpc_wordcount" / "__init__.py").exists()
    return {**os.environ, "PYTHONPATH": str(site)}


def cli(env, *args, timeout=120):
    return subprocess.run([sys.executable, "-m", "splitrpc", *args], capture_output=True, text=True, env=env,
                          cwd=env["PYTHONPATH"], timeout=timeout)


def test_its_command_and_its_suite(env):
    r = cli(env, "wordcount", "the", "quick  brown", "fox")
    assert r.returncode == 0 and r.stdout.strip() == "4 words", r.stdout + r.stderr
    assert re.search(r"^\s+wordcount\s", cli(env, "--help").stdout, re.M)  # listed among the commands
    r = cli(env, "bench", "wordcount", "--calls", "300")
    assert r.returncode == 0 and re.match(r"wordcount: 300 calls in [\d.]+ s", r.stdout), r.stdout + r.stderr
    assert "wordcount" in cli(env, "bench", "--help").stdout


def test_its_check_section(env, tmp_path):
    assert "wordcount" in cli(env, "check", "--list").stdout.split()
    out = tmp_path / "out"
    r = cli(env, "check", "--only", "wordcount", "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    sec = json.loads((out / "check.json").read_text())["sections"]["wordcount"]
    assert sec["verdict"] == "passed" and sec["summary"] == "5 texts counted right, 8 words in the stats", sec


def test_its_function_and_its_metric(env):
    p = subprocess.Popen([sys.executable, "-m", "splitrpc", "serve", "--port", "0", "--models", "wordcount",
                          "--metrics-port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         cwd=env["PYTHONPATH"])
    try:
        lines = "".join(read_until(p, lambda ln: "metrics: http" in ln))
        port = int(re.search(r"wordcount\(310\).* on 127\.0\.0\.1:(\d+)", lines).group(1))
        url = re.search(r"metrics: (http://\S+)", lines).group(1)
        with splitrpc.Client("127.0.0.1", port, timeout=5.0) as c:
            assert c.call(310, b"one two three") == (3).to_bytes(4, "little")
            assert c.call(310, b"four five") == (2).to_bytes(4, "little")
        with urllib.request.urlopen(url, timeout=5) as r:
            text = r.read().decode()
        assert re.search(r"^splitrpc_wordcount_words_total 5\.0$", text, re.M), text[-2000:]
        r = cli(env, "call", "wordcount", "--port", str(port), "--text", "a b c d e f g")
        assert r.returncode == 0 and "7 words" in r.stdout, r.stdout + r.stderr
    finally:
        p.terminate()
        assert p.wait(10) == 0


def test_splitrpc_names_none_of_it():
    """The capability came with no file of splitrpc changed: the installed package names it nowhere."""
    pkg = Path(splitrpc.__file__).parent
    named = [str(f.relative_to(pkg)) for f in pkg.rglob("*.py") if "wordcount" in f.read_text()]
    assert not named, named

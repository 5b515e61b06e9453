"""The power half of the efficiency tuples (issue 32): a GPU's board power read through nvidia-smi while a measurement runs, its mean over the window, and no reading (None, saying why) where there is no nvidia-smi or it reports none. nvidia-smi is stood in for by scripts on PATH: this machine has no GPU."""
import os
import stat
import time

import pytest

from splitrpc.loadgen.planning import power


def _fake_smi(tmp_path, body: str) -> str:
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    exe = d / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + body + "\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(d)


def test_the_mean_of_the_readings_over_the_window(tmp_path, monkeypatch):
    # a stand-in that reads 100 W, then 200 W, ... from a counter file, and checks the query it got
    count = tmp_path / "n"
    count.write_text("0")
    d = _fake_smi(tmp_path, f'case "$*" in *power.draw*noheader,nounits*"-i 0"*) ;; *) echo bad query "$*" >&2; exit 3;; esac\n'
                            f'n=$(cat {count}); n=$((n + 1)); echo $n > {count}; echo "$((n * 100)).00"')
    monkeypatch.setenv("PATH", d + os.pathsep + os.environ["PATH"])
    assert power.read_watts(0) == 100.0
    count.write_text("0")
    with power.PowerMeter(0, interval_s=0.05) as m:
        time.sleep(0.3)
    n = len(m.samples)
    assert n >= 3 and m.samples == [100.0 * (i + 1) for i in range(n)]
    assert m.watts == pytest.approx(sum(m.samples) / n) and m.why is None


@pytest.mark.parametrize("body,why", [('echo "[N/A]"', "no power for GPU 0"), ("echo 'no devices' >&2; exit 6", "exited 6"),
                                      ("echo 0.00", "0.0 W")])
def test_no_reading_is_none_and_says_why(tmp_path, monkeypatch, body, why):
    monkeypatch.setenv("PATH", _fake_smi(tmp_path, body) + os.pathsep + os.environ["PATH"])
    with pytest.raises(RuntimeError, match="N/A|exited 6|0.0 W"):
        power.read_watts(0)
    m = power.PowerMeter(0).start()
    assert m.stop() is None and why in m.why


def test_without_nvidia_smi(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no nvidia-smi
    m = power.PowerMeter().start()
    assert m.stop() is None and "no nvidia-smi" in m.why

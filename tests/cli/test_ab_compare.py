"""tools/ab_compare.py over a folder of `device_attention.sh ab` runs (ab_<tag>_run<N>.json):
the ratio of the mean times over the runs cell by cell, its geometric mean and range per format,
launched and from graphs; the int4 cells with each run's ratio, the copy share and the SDPA
multiple of every build; clear errors for a missing base build and for builds with other runs
or fewer cells."""
import json
import math
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "ab_compare.py")


def row(fmt, batch, us, us_graph, pct=50.0, sdpa=2.0):
    return {"format": fmt, "heads": 28, "kv_heads": 4, "batch": batch, "context": 8192,
            "us": us, "us_graph": us_graph, "pct_copy": pct, "speedup_vs_sdpa": sdpa}


def write(folder, tag, run, rows):
    with open(os.path.join(folder, f"ab_{tag}_run{run}.json"), "w") as f:
        json.dump({"rows": rows}, f)


def run(folder, *args):
    return subprocess.run([sys.executable, TOOL, str(folder), *args], capture_output=True,
                          text=True)


def test_ratios_over_runs(tmp_path):
    # main: int4 B 16 at 100 / 120 us (mean 110), B 64 at 400 / 400; new: 99 / 99 (0.9x) and
    # 440 / 440 (1.1x); 16-bit unchanged.
    write(tmp_path, "main", 1, [row("int4", 16, 100, 90, 40, 2.0), row("int4", 64, 400, 380),
                                row("16bit", 16, 50, 45)])
    write(tmp_path, "main", 2, [row("int4", 16, 120, 90, 60, 2.2), row("int4", 64, 400, 380),
                                row("16bit", 16, 50, 45)])
    write(tmp_path, "new", 1, [row("int4", 16, 99, 90, 45, 2.4), row("int4", 64, 440, 380),
                               row("16bit", 16, 50, 45)])
    write(tmp_path, "new", 2, [row("int4", 16, 99, 90, 55, 2.6), row("int4", 64, 440, 380),
                               row("16bit", 16, 50, 45)])
    (tmp_path / "ab_main.json").write_text("{}")  # not ab_<tag>_run<N>.json: left alone
    out = run(tmp_path, "--base", "main")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("2 runs (1, 2)")
    int4 = next(l for l in lines if l.split()[:2] == ["new", "int4"])
    gm = math.sqrt(0.9 * 1.1)
    assert f"us geomean {gm:.3f} [0.900 .. 1.100]" in int4
    assert "us_graph geomean 1.000 [1.000 .. 1.000]" in int4
    bit16 = next(l for l in lines if l.split()[:2] == ["new", "16bit"])
    assert "us geomean 1.000 [1.000 .. 1.000]" in bit16
    cell = next(l for l in lines if l.startswith("28/4 B  16"))
    assert "110.0" in cell and "new     99.0 (0.900; 0.990,0.825)" in cell
    assert "% 50.0 50.0" in cell and "x 2.10 2.50" in cell


def test_errors(tmp_path):
    write(tmp_path, "new", 1, [row("int4", 16, 1, 1)])
    out = run(tmp_path, "--base", "main")
    assert out.returncode != 0 and "no ab_main_run<N>.json" in out.stderr
    write(tmp_path, "main", 1, [row("int4", 16, 1, 1)])
    write(tmp_path, "main", 2, [row("int4", 16, 1, 1)])
    out = run(tmp_path, "--base", "main")
    assert out.returncode != 0 and "new has runs [1], main [1, 2]" in out.stderr
    write(tmp_path, "new", 2, [row("int4", 64, 1, 1)])
    out = run(tmp_path, "--base", "main")
    assert out.returncode != 0 and "new run 2 lacks 1 of main's cells" in out.stderr

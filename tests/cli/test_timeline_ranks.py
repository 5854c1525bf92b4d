"""tools/timeline_ranks.py on a decode timeline CSV: the int4 kernel's blocks grouped by their
dispatch rank on their multiprocessor (grid order blockIdx.y * gridDim.x + blockIdx.x, not the
order of the file's lines), the other kernels' records left out, and the kernel's end against
the multiprocessors' mean and last exits."""
import gzip
import importlib.util
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "timeline_ranks.py")
spec = importlib.util.spec_from_file_location("timeline_ranks", TOOL)
timeline_ranks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(timeline_ranks)

HEADER = "kernel,sm,x,y,entry,issued,loop,first,loop_end,exit\n"
# Two multiprocessors, a grid of 2 x 2: block (x, y) has grid index 2 y + x. SM 7 holds blocks 0
# and 3, SM 9 blocks 1 and 2; the later-dispatched block of each loops longer. Listed out of
# order, with a row-kernel record that must not count.
LINES = [
    "0,9,0,1,0.1,1.0,4.0,4.1,24.0,25.0",  # index 2, rank 1 on SM 9: loop 20
    "0,7,1,1,0.1,1.0,4.0,4.1,26.0,27.0",  # index 3, rank 1 on SM 7: loop 22
    "1,7,0,0,9.0,0.0,10.0,10.1,90.0,95.0",  # the row kernel: left out
    "0,7,0,0,0.0,1.0,4.0,4.1,14.0,15.0",  # index 0, rank 0 on SM 7: loop 10
    "0,9,1,0,0.0,1.0,4.0,4.1,16.0,17.0",  # index 1, rank 0 on SM 9: loop 12
]


def write(tmp_path, lines):
    path = tmp_path / "int4_28_4_b16_c8192_graph.csv"
    path.write_text(HEADER + "\n".join(lines) + "\n")
    return str(path)


def test_ranks_by_grid_order_and_ends(tmp_path):
    out = timeline_ranks.summarize(write(tmp_path, LINES))
    assert "4 blocks on 2 multiprocessors" in out
    assert "0: 11.0 (2), 1: 21.0 (2)" in out  # rank 0 loops 10, 12; rank 1 20, 22
    # end 27 (SM 7's last); last exits 27 and 25 (median 26); mean exits 21 (SM 7) and 21 (SM 9)
    assert "end 27.0 us; multiprocessors' last exit median 26.0, mean exit 21.0 (largest 21.0)" in out


def test_gzipped(tmp_path):
    path = tmp_path / "t.csv.gz"
    with gzip.open(path, "wt") as f:
        f.write(HEADER + "\n".join(LINES) + "\n")
    assert "0: 11.0 (2), 1: 21.0 (2)" in timeline_ranks.summarize(str(path))


def test_no_int4_blocks(tmp_path):
    out = timeline_ranks.summarize(write(tmp_path, [LINES[2]]))
    assert out.endswith("no int4 blocks")


def test_command_line(tmp_path):
    path = write(tmp_path, LINES)
    res = subprocess.run([sys.executable, TOOL, path], capture_output=True, text=True, check=True)
    assert "loop us by dispatch rank" in res.stdout

"""tools/ncu_stalls.py on a source page in the form `ncu -i REPORT --page source --csv
--print-source sass` prints: the header found after the lines ncu puts before it, samples summed
per stall reason and per opcode (predicates and modifiers dropped), a ledger per loop the page's
branches show, an address range kept
inclusively, the top instructions with their largest reasons, and a clear error when the report
has no stall samples."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "ncu_stalls.py")
spec = importlib.util.spec_from_file_location("ncu_stalls", TOOL)
ncu_stalls = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ncu_stalls)

HEADER = ('"Address","Source","Warp Stall Sampling (All Samples)",'
          '"Warp Stall Sampling (Not-issued Samples)","Instructions Executed",'
          '"stall_short_scoreboard","stall_long_scoreboard","stall_barrier"')
PAGE = "\n".join([
    '"Kernel Name","decode_int4_kernel"',
    HEADER,
    '"0x0000","LDC R1, c[0x0][0x28]","2","2","1","0","0","0"',
    '"0x1cc0","BAR.SYNC.DEFER_BLOCKING 0x0","50","50","100","0","0","50"',
    '"0x1cd0","@!P0 LDS.128 R52, [R88]","10","4","100","0","4","0"',
    '"0x1ce0","HFMA2 R71, R71, R53, R65","1,200","1,000","100","900","0","100"',
    '"0x1cf0","HFMA2.MMA R70, R70, R53, R65","40","40","100","40","0","0"',
    '"0x1d00","@P0 BRA 0x1cc0","","","100","","",""',
    '"0x1d10","EXIT","3","3","1","0","0","0"',
    '"","","","","","","",""',
])


def rows(text=PAGE):
    return ncu_stalls.read_rows(text.splitlines())


def test_header_after_preamble_and_rows():
    header, recs = rows()
    assert "stall_barrier" in header
    assert [r["_address"] for r in recs] == [0x0, 0x1cc0, 0x1cd0, 0x1ce0, 0x1cf0, 0x1d00, 0x1d10]


def test_ledger_of_a_range():
    header, recs = rows()
    out = ncu_stalls.ledger(header, recs, 0x1cc0, 0x1d00, top=2)
    assert out["instructions"] == 5
    assert out["samples"] == 1300.0  # thousands separator read
    assert out["not_issued_samples"] == 1094.0
    assert out["by_reason"] == {"short_scoreboard": 940.0, "barrier": 150.0,
                                "long_scoreboard": 4.0}
    assert out["by_opcode"]["HFMA2"] == {"samples": 1240.0, "instructions": 2}
    assert out["by_opcode"]["BRA"] == {"samples": 0.0, "instructions": 1}
    assert [t["address"] for t in out["top"]] == ["0x1ce0", "0x1cc0"]
    assert out["top"][0]["reasons"] == {"short_scoreboard": 900.0, "barrier": 100.0}


def test_whole_function_without_range():
    header, recs = rows()
    assert ncu_stalls.ledger(header, recs)["samples"] == 1305.0


def test_cli_prints_and_writes_json(tmp_path):
    page = tmp_path / "page.csv"
    page.write_text(PAGE)
    out = tmp_path / "ledger.json"
    r = subprocess.run([sys.executable, TOOL, str(page), "--range", "0x1cc0-0x1d00", "--top", "3",
                        "--json", str(out)], capture_output=True, text=True, check=True)
    assert r.stdout.startswith("5 instructions, 1300 samples (84.2 % not issued)")
    assert "short_scoreboard 72.3 %" in r.stdout
    assert ("0x1ce0  92.3 %  HFMA2 R71, R71, R53, R65  [short_scoreboard 900, barrier 100]"
            in r.stdout)
    assert json.loads(out.read_text())["samples"] == 1300.0


def test_no_samples_column_is_an_error():
    text = PAGE.replace("Warp Stall Sampling (All Samples)", "Something Else")
    header, recs = rows(text)
    with pytest.raises(ValueError, match="SourceCounters"):
        ncu_stalls.ledger(header, recs)


def test_no_header_is_an_error():
    with pytest.raises(ValueError, match="no header"):
        ncu_stalls.read_rows(['"a","b"', '"1","2"'])


def test_loops_from_the_page_branches(tmp_path):
    page = tmp_path / "page.csv"
    page.write_text(PAGE)
    out = tmp_path / "ledger.json"
    r = subprocess.run([sys.executable, TOOL, str(page), "--loops", "3", "--json", str(out)],
                       capture_output=True, text=True, check=True)
    assert "\nloop 0x1cc0-0x1d00:\n5 instructions, 1300 samples" in r.stdout
    assert [lp["range"] for lp in json.loads(out.read_text())["loops"]] == ["0x1cc0-0x1d00"]
    r = subprocess.run([sys.executable, TOOL, str(page), "--loops", "6"],
                       capture_output=True, text=True, check=True)
    assert "no loop of 6 or more instructions" in r.stdout

"""tools/sass_loops.py on SASS text (the form cuobjdump -sass prints): functions split by their
headers, loops found from backward branches, guarded and dotted opcodes counted by their base,
registers and stack from the resource usage cuobjdump --dump-resource-usage prints, and a clear
exit when cuobjdump is missing or no function matches."""
import importlib.util
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "sass_loops.py")
spec = importlib.util.spec_from_file_location("sass_loops", TOOL)
sass_loops = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sass_loops)

SASS = """
	code for sm_90
		Function : _Z6kernelAv
	.headerflags	@"EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                       /* 0x00000a00ff017b82 */
        /*0010*/                   S2R R0, SR_TID.X ;                           /* 0x0000000000007919 */
        /*0020*/                   IMAD.MOV.U32 R2, RZ, RZ, RZ ;                /* 0x000000ffff027224 */
        /*0030*/                   HMMA.16816.F32 R4, R8, R12, R4 ;             /* 0x0000000c0804723c */
        /*0040*/               @P0 IMAD R2, R2, 0x2, R0 ;                       /* 0x0000000202020824 */
        /*0050*/              @!P1 LDS.128 R8, [R2] ;                           /* 0x0000000002089984 */
        /*0060*/                   ISETP.NE.AND P0, PT, R2, RZ, PT ;            /* 0x000000ff0200720c */
        /*0070*/               @P0 BRA 0x30 ;                                   /* 0xfffffffc00e80947 */
        /*0080*/                   BRA 0x90 ;                                   /* 0x0000000000007947 */
        /*0090*/                   EXIT ;                                       /* 0x000000000000794d */
		Function : _Z6kernelBv
        /*0000*/                   MOV R1, c[0x0][0x28] ;                       /* 0x00000a0000017a02 */
        /*0010*/                   EXIT ;                                       /* 0x000000000000794d */
"""


USAGE = """
Resource usage:
 Common:
  GLOBAL:0
 Function _Z6kernelAv:
  REG:184 STACK:0 SHARED:1024 LOCAL:0 CONSTANT[0]:936 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function _Z6kernelBv:
  REG:168 STACK:24 SHARED:0 LOCAL:0 CONSTANT[0]:900 TEXTURE:0 SURFACE:0 SAMPLER:0
"""


def test_resources():
    assert sass_loops.resources(USAGE) == {"_Z6kernelAv": (184, 0), "_Z6kernelBv": (168, 24)}


def test_functions_and_loops():
    fns = sass_loops.functions(SASS)
    assert list(fns) == ["_Z6kernelAv", "_Z6kernelBv"]
    assert len(fns["_Z6kernelAv"]) == 10 and len(fns["_Z6kernelBv"]) == 2
    found = sass_loops.loops(fns["_Z6kernelAv"], min_len=2)
    assert len(found) == 1  # the forward BRA 0x90 is not a loop
    loop = found[0]
    assert (loop["begin"], loop["end"], loop["instructions"]) == ("0x30", "0x70", 5)
    assert loop["opcodes"] == {"HMMA": 1, "IMAD": 1, "LDS": 1, "ISETP": 1, "BRA": 1}
    assert sass_loops.loops(fns["_Z6kernelAv"], min_len=6) == []


def test_missing_cuobjdump_and_no_match(tmp_path):
    obj = tmp_path / "k.o"
    obj.write_bytes(b"")
    r = subprocess.run([sys.executable, TOOL, str(obj), "--kernel", "x", "--cuobjdump",
                        str(tmp_path / "nope")], capture_output=True, text=True)
    assert r.returncode == 1 and "no cuobjdump at" in r.stderr
    fake = tmp_path / "cuobjdump"
    fake.write_text("#!/bin/sh\nif [ \"$1\" = --dump-resource-usage ]; then cat <<'EOS'\n" + USAGE +
                    "EOS\nelse cat <<'EOS'\n" + SASS + "EOS\nfi\n")
    fake.chmod(0o755)
    r = subprocess.run([sys.executable, TOOL, str(obj), "--kernel", "kernelZ", "--cuobjdump",
                        str(fake)], capture_output=True, text=True)
    assert r.returncode == 1 and "no function" in r.stderr and "kernelZ" in r.stderr
    r = subprocess.run([sys.executable, TOOL, str(obj), "--kernel", "kernelA", "--min", "2",
                        "--cuobjdump", str(fake)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "loop 0x30-0x70: 5 instructions" in r.stdout
    assert "_Z6kernelAv: 10 instructions, 184 registers, 0 bytes of stack" in r.stdout

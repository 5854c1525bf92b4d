"""Everything bench/cpu_vs_llamacpp/run.py needs besides S4 KV's own build, made once and kept
in the git-ignored work folder (bench/cpu_vs_llamacpp/.work/): a venv with the pinned converter
packages, llama.cpp's source from the pinned PyPI source package of llama-cpp-python, its CPU
tools built with cmake, and the bundled model as a bf16 GGUF file. Each step is skipped when its
output is present and was made from the same inputs (a stamp file records them), so a second run
builds and downloads nothing.
"""
import hashlib
import json
import os
import subprocess
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.path.join(HERE, ".work")
LLAMA_CPP_PYTHON = "0.3.36"
LLAMA_CPP_COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
TOOLS = ["llama-bench", "llama-batched-bench", "llama-simple", "llama-tokenize"]
# CPU only, static, tuned for this CPU (as llama.cpp's default GGML_NATIVE); no network code.
CMAKE_FLAGS = ["-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DGGML_NATIVE=ON",
               "-DGGML_CUDA=OFF", "-DGGML_METAL=OFF", "-DGGML_VULKAN=OFF", "-DLLAMA_BUILD_TESTS=OFF",
               "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_OPENSSL=OFF",
               "-DLLAMA_CURL=OFF"]


def log(msg):
    print(f"[setup] {msg}", flush=True)


def run(cmd, **kw):
    subprocess.run(cmd, check=True, **kw)


def fresh(stamp_path, key):
    try:
        with open(stamp_path) as f:
            return f.read() == key
    except OSError:
        return False


def write_stamp(stamp_path, key):
    with open(stamp_path, "w") as f:
        f.write(key)


def venv():
    """The converter's venv: python3 -m venv plus requirements.txt; returns its python."""
    python = os.path.join(WORK, "venv", "bin", "python")
    with open(os.path.join(HERE, "requirements.txt")) as f:
        key = f.read()
    stamp = os.path.join(WORK, "venv", ".requirements")
    if os.path.exists(python) and fresh(stamp, key):
        return python
    log("creating the venv .work/venv (gguf, numpy)")
    run([sys.executable, "-m", "venv", os.path.join(WORK, "venv")])
    run([python, "-m", "pip", "install", "-q", "-r", os.path.join(HERE, "requirements.txt")])
    write_stamp(stamp, key)
    return python


def llama_source(python):
    """Downloads and unpacks the llama-cpp-python source package; returns its vendor/llama.cpp."""
    src = os.path.join(WORK, "src", f"llama_cpp_python-{LLAMA_CPP_PYTHON}")
    tree = os.path.join(src, "vendor", "llama.cpp")
    if not os.path.exists(os.path.join(tree, "CMakeLists.txt")):
        dl = os.path.join(WORK, "dl")
        archive = os.path.join(dl, f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz")
        if not os.path.exists(archive):
            log(f"downloading llama-cpp-python=={LLAMA_CPP_PYTHON} (source package, ~77 MB) from PyPI")
            run([python, "-m", "pip", "download", "-q", "--no-binary", ":all:", "--no-deps",
                 f"llama-cpp-python=={LLAMA_CPP_PYTHON}", "-d", dl])
        log("unpacking it")
        with tarfile.open(archive) as tar:
            tar.extractall(os.path.join(WORK, "src"), filter="data")
    # The package records the vendored commit in its git metadata.
    head = os.path.join(src, ".git", "modules", "vendor", "llama.cpp", "HEAD")
    commit = open(head).read().strip() if os.path.exists(head) else "unknown"
    if commit != LLAMA_CPP_COMMIT:
        sys.exit(f"{head}: llama.cpp commit {commit}, expected {LLAMA_CPP_COMMIT}")
    return tree, commit


def llama_build(tree, jobs):
    """cmake configure and build of TOOLS only; returns the bin directory."""
    build = os.path.join(WORK, "build-llama")
    bin_dir = os.path.join(build, "bin")
    key = json.dumps({"flags": CMAKE_FLAGS, "tools": TOOLS, "tree": tree})
    stamp = os.path.join(build, ".s4kv-bench-stamp")
    if all(os.path.exists(os.path.join(bin_dir, t)) for t in TOOLS) and fresh(stamp, key):
        return bin_dir
    log(f"building llama.cpp's CPU tools ({', '.join(TOOLS)}) with {jobs} jobs; minutes")
    with open(os.path.join(WORK, "build-llama.log"), "w") as out:
        run(["cmake", "-S", tree, "-B", build] + CMAKE_FLAGS, stdout=out, stderr=subprocess.STDOUT)
        run(["cmake", "--build", build, "--config", "Release", "-j", str(jobs), "--target"] + TOOLS,
            stdout=out, stderr=subprocess.STDOUT)
    write_stamp(stamp, key)
    return bin_dir


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def gguf_file(python, model):
    """Converts the model with to_gguf.py unless the file was made from the same inputs."""
    out = os.path.join(WORK, os.path.basename(os.path.normpath(model)) + "-bf16.gguf")
    inputs = [os.path.join(model, n) for n in ("config.json", "model.safetensors", "tokenizer.json",
                                                "tokenizer_config.json", "generation_config.json")]
    inputs.append(os.path.join(HERE, "to_gguf.py"))
    key = json.dumps([sha256(p) for p in inputs if os.path.exists(p)])
    stamp = out + ".stamp"
    if os.path.exists(out) and fresh(stamp, key):
        with open(out + ".json") as f:
            return out, json.load(f)
    log(f"converting {model} to {os.path.relpath(out)}")
    info = subprocess.run([python, os.path.join(HERE, "to_gguf.py"), model, out], check=True,
                          capture_output=True, text=True).stdout
    with open(out + ".json", "w") as f:
        f.write(info)
    write_stamp(stamp, key)
    return out, json.loads(info)


def setup(model, jobs):
    """Returns {"bin": llama.cpp tools' dir, "commit", "gguf", "gguf_info", "cmake_flags"}."""
    os.makedirs(WORK, exist_ok=True)
    python = venv()
    tree, commit = llama_source(python)
    bin_dir = llama_build(tree, jobs)
    gguf, info = gguf_file(python, model)
    info.pop("gguf", None)
    info["sha256"] = sha256(gguf)
    return {"bin": bin_dir, "commit": commit, "gguf": gguf, "gguf_info": info,
            "cmake_flags": CMAKE_FLAGS}

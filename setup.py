"""Builds the `perseus` Python package's compiled parts with CMake (see pyproject.toml).

The CMake target perseus_python_package lays the whole package out in <build>/python/perseus/;
the compiled module, the `perseus` binary and the fake NVML are copied from there into the
wheel. The build is for the interpreter running this (sys.executable). Before anything is built,
the tools the build needs are checked, and what is missing is named with the command that installs
it.

Build folder: PERSEUS_CMAKE_BUILD_DIR if set; else the checkout's build/ when scripts/setup.sh has
configured it for this interpreter (only what changed since is compiled); else build/pip/<interpreter>
(a build of its own, about 7 minutes on 2 cores the first time). Unless PERSEUS_CMAKE_BUILD_DIR is
set (as scripts set it), the build's progress goes to the terminal even while pip hides the build's
output.

Environment:
  PERSEUS_CMAKE_BUILD_DIR  reuse this configured CMake build directory (it must be for this interpreter)
  PERSEUS_BUILD_JOBS       parallel build jobs (default: the number of CPUs)
"""
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def project_version() -> str:
    """The version in CMakeLists.txt's project() line: one version for C++ and Python."""
    match = re.search(r"project\(perseus VERSION ([0-9.]+)", (ROOT / "CMakeLists.txt").read_text())
    if not match:
        raise RuntimeError("setup.py: no `project(perseus VERSION x.y.z` line in CMakeLists.txt")
    return match.group(1)


def check_reused_interpreter(build_dir: Path) -> None:
    """A reused build must already be for this interpreter (a virtual environment's python counts as
    its base interpreter): it is never reconfigured behind its owner's back."""
    cache = build_dir / "CMakeCache.txt"
    if not cache.exists():
        raise RuntimeError(f"setup.py: PERSEUS_CMAKE_BUILD_DIR={build_dir} is not a configured CMake build")
    # What FindPython3 settled on (an internal entry); Python3_EXECUTABLE is cached only when given.
    text = cache.read_text()
    match = re.search(r"^_Python3_EXECUTABLE:INTERNAL=(.*)$", text, re.MULTILINE) or \
        re.search(r"^Python3_EXECUTABLE:[A-Z]+=(.*)$", text, re.MULTILINE)
    built_for = os.path.realpath(match.group(1)) if match else None
    if built_for != os.path.realpath(sys.executable):
        raise RuntimeError(f"setup.py: {build_dir} builds the module for {built_for}, but pip runs "
                           f"{os.path.realpath(sys.executable)}; unset PERSEUS_CMAKE_BUILD_DIR to build for it")

DEBIAN_PYTHON = "/usr/bin/python3"
BUILDING = {"dist_info", "bdist_wheel", "build_ext", "build", "install", "develop", "editable_wheel", "bdist_egg"}


def is_debian_python() -> bool:
    """Debian's interpreter, or a virtual environment made from it: scripts/setup.sh installs its
    build tools (python3-wheel, pybind11-dev, python3-dev)."""
    return os.path.realpath(sys.executable) == os.path.realpath(DEBIAN_PYTHON)


def pybind11_cmake_dir() -> "str | None":
    """Where pybind11's CMake files are for this build: pybind11 installed into this interpreter
    (pip install pybind11) first, else Debian's pybind11-dev (headers only; it serves any interpreter)."""
    if importlib.util.find_spec("pybind11") is not None:
        import pybind11  # type: ignore[import-not-found]
        return str(pybind11.get_cmake_dir())
    for prefix in ("/usr/lib/cmake/pybind11", "/usr/share/cmake/pybind11", "/usr/local/lib/cmake/pybind11"):
        if Path(prefix, "pybind11Config.cmake").exists():
            return prefix
    return None


def debian_venv_command() -> str:
    """The command that makes the virtual environment pip runs in (or a new .venv) one of Debian's
    interpreter that sees the Debian packages scripts/setup.sh --deps-only installs. --clear: over a
    venv of another interpreter, venv would otherwise leave that interpreter's files and a broken venv."""
    venv = sys.prefix if sys.prefix != sys.base_prefix else ".venv"
    return f"{DEBIAN_PYTHON} -m venv --clear --system-site-packages {venv}"


def missing_build_requirements() -> "list[tuple[str, str]]":
    """(what is missing, the command that installs it) for each tool the build needs and lacks. The
    first fix named works without a package index; `pip install` ones need PyPI."""
    python = sys.executable
    debian = is_debian_python()
    in_venv = sys.prefix != sys.base_prefix
    use_debian = (f"remake this venv with Debian's interpreter and the packages scripts/setup.sh --deps-only installs "
                  f"for it (--clear empties the venv first: reinstall what you had put in it), then run pip again: "
                  f"`{debian_venv_command()}`")
    if not in_venv:
        use_debian = (f"use a venv of Debian's interpreter, which scripts/setup.sh --deps-only equips: "
                      f"`{debian_venv_command()} && .venv/bin/pip install --no-build-isolation .`")
    with_pypi = "or, with access to PyPI,"
    missing = []
    if sys.version_info < (3, 9):
        missing.append((f"Python 3.9 or newer (this is {sys.version.split()[0]})", use_debian))
    if importlib.util.find_spec("wheel") is None and \
            importlib.util.find_spec("setuptools.command.bdist_wheel") is None:
        fix = "`sudo apt-get install python3-wheel`" if debian and not in_venv else \
            f"{use_debian}; {with_pypi} `{python} -m pip install wheel`"
        missing.append(("the `wheel` package (this setuptools has no bdist_wheel without it)", fix))
    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").exists():
        missing.append((f"this interpreter's C headers ({include}/Python.h)",
                        "`sudo apt-get install python3-dev`" if debian else
                        f"{use_debian}; or your Python distribution's development package"))
    if pybind11_cmake_dir() is None:
        missing.append(("pybind11", "`sudo apt-get install pybind11-dev`" if debian else
                        f"{use_debian}; {with_pypi} `{python} -m pip install pybind11`"))
    if shutil.which("cmake") is None:
        missing.append(("CMake", "`sudo apt-get install cmake` (scripts/setup.sh --deps-only installs every C++ dependency)"))
    if shutil.which("g++") is None and shutil.which("c++") is None:
        missing.append(("a C++20 compiler", "`sudo apt-get install g++-12` (scripts/setup.sh --deps-only installs every C++ dependency)"))
    return missing


def check_build_requirements() -> None:
    """Stops before the build starts, in one paragraph, when something the build needs is missing."""
    missing = missing_build_requirements()
    if missing:
        lines = [f"perseus cannot be built for {sys.executable} (Python {sys.version.split()[0]}): it needs"]
        lines += [f"  - {what}: {fix}" for what, fix in missing]
        sys.exit("\n".join(lines))


def progress_stream(to_terminal: bool):
    """Where build progress goes: the terminal itself when there is one and a person runs pip (pip
    hides what the build prints unless run with -v), else standard error, which pip -v shows as it
    comes (the README's command has -v: a log without a terminal then shows the progress too). Never
    both: with a terminal and -v each line would show twice."""
    if to_terminal:
        try:
            return open("/dev/tty", "w")
        except OSError:
            pass
    return sys.stderr


def run_showing_progress(command: "list[str]", out) -> None:
    """Runs a build step, copying its output to `out` line by line (ninja's [done/total] lines). When
    it fails, its last lines go to standard error too: pip shows that of a failed build."""
    last: "list[str]" = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as process:
        assert process.stdout is not None
        for line in process.stdout:
            out.write(line)
            out.flush()
            last = (last + [line])[-60:]
    if process.returncode != 0:
        if out is not sys.stderr:
            sys.stderr.write("".join(last))
        raise subprocess.CalledProcessError(process.returncode, command)


def reusable_build_dir() -> "tuple[Path | None, str]":
    """The checkout's build/ from scripts/setup.sh when it is configured for this interpreter, else
    None and why not."""
    build = ROOT / "build"
    if not (build / "CMakeCache.txt").exists():
        return None, ""
    try:
        check_reused_interpreter(build)
    except RuntimeError:
        return None, f"{build} is configured for another interpreter; "
    return build, ""


class CMakeBuild(build_ext):
    """Runs CMake instead of compiling sources itself."""

    def build_extension(self, ext: Extension) -> None:
        explicit = os.environ.get("PERSEUS_CMAKE_BUILD_DIR")
        reuse, why_not = (Path(explicit).resolve(), "") if explicit else reusable_build_dir()
        tag = sysconfig.get_config_var("SOABI") or f"py{sys.version_info[0]}{sys.version_info[1]}"
        build_dir = reuse or ROOT / "build" / "pip" / tag
        configure = ["cmake", "-S", str(ROOT), "-B", str(build_dir)]
        if reuse:
            check_reused_interpreter(build_dir)
        else:
            configure.append(f"-DPython3_EXECUTABLE={sys.executable}")
            configure += ["-DCMAKE_BUILD_TYPE=Release", "-DPERSEUS_BUILD_TESTS=OFF", "-DPERSEUS_BUILD_BENCH=OFF"]
            cmake_dir = pybind11_cmake_dir()
            if cmake_dir:
                configure.append(f"-Dpybind11_DIR={cmake_dir}")
            if not (build_dir / "CMakeCache.txt").exists():
                if shutil.which("ninja"):
                    configure += ["-G", "Ninja"]
                if shutil.which("ccache"):
                    configure += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache", "-DCMAKE_C_COMPILER_LAUNCHER=ccache"]
        jobs = os.environ.get("PERSEUS_BUILD_JOBS", str(os.cpu_count() or 1))
        out = progress_stream(to_terminal=not explicit)  # scripts name the folder and keep quiet
        started = time.monotonic()
        if reuse:
            out.write(f"perseus: building the Python package in {build_dir} (reused: only what changed is compiled)\n")
        else:
            out.write(f"perseus: {why_not}building the Python package in {build_dir} (the first time about 7 "
                      f"minutes on 2 cores; after `scripts/setup.sh` pip reuses its build/ for {DEBIAN_PYTHON})\n")
        out.flush()
        if not reuse:
            run_showing_progress(configure, out)
        run_showing_progress(["cmake", "--build", str(build_dir), "--target", "perseus_python_package", "--parallel", jobs],
                             out)
        out.write(f"perseus: built in {time.monotonic() - started:.0f} s\n")
        out.flush()

        built = build_dir / "python" / "perseus"
        modules = list(built.glob("_perseus*.so"))
        if len(modules) != 1:
            raise RuntimeError(f"setup.py: expected one _perseus*.so in {built}, found {modules}")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(modules[0], target)
        for part in ("bin/perseus", "lib/libperseus_fake_nvml.so"):
            destination = target.parent / part
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(built / part, destination)


if BUILDING.intersection(sys.argv[1:]):
    check_build_requirements()
    # setuptools' own lines (a "copying" line per file) would bury the build's progress in pip -v's
    # output; warnings and errors still show.
    if not {"-v", "--verbose", "-q", "--quiet"}.intersection(sys.argv[1:]):
        sys.argv.insert(1, "--quiet")

setup(
    version=project_version(),
    ext_modules=[Extension("perseus._perseus", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    # setuptools' own build folder would otherwise be build/, which is CMake's.
    options={"build": {"build_base": "build/setuptools"}, "egg_info": {"egg_base": "build"}},
    zip_safe=False,
)

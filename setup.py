"""Builds the `perseus` Python package's compiled parts with CMake (see pyproject.toml).

The CMake target perseus_python_package lays the whole package out in <build>/python/perseus/;
the compiled module, the `perseus` binary and the fake NVML are copied from there into the
wheel. The build is for the interpreter running this (sys.executable).

Environment:
  PERSEUS_CMAKE_BUILD_DIR  reuse this CMake build directory (e.g. `build` after scripts/setup.sh)
                           instead of build/pip/<interpreter>; only the package target is built
  PERSEUS_BUILD_JOBS       parallel build jobs (default: the number of CPUs)
"""
import os
import re
import shutil
import subprocess
import sys
import sysconfig
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


class CMakeBuild(build_ext):
    """Runs CMake instead of compiling sources itself."""

    def build_extension(self, ext: Extension) -> None:
        reuse = os.environ.get("PERSEUS_CMAKE_BUILD_DIR")
        tag = sysconfig.get_config_var("SOABI") or f"py{sys.version_info[0]}{sys.version_info[1]}"
        build_dir = Path(reuse).resolve() if reuse else ROOT / "build" / "pip" / tag
        configure = ["cmake", "-S", str(ROOT), "-B", str(build_dir)]
        if reuse:
            check_reused_interpreter(build_dir)
        else:
            configure.append(f"-DPython3_EXECUTABLE={sys.executable}")
            configure += ["-DCMAKE_BUILD_TYPE=Release", "-DPERSEUS_BUILD_TESTS=OFF", "-DPERSEUS_BUILD_BENCH=OFF"]
            if shutil.which("ninja") and not (build_dir / "CMakeCache.txt").exists():
                configure += ["-G", "Ninja"]
        jobs = os.environ.get("PERSEUS_BUILD_JOBS", str(os.cpu_count() or 1))
        subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "perseus_python_package", "--parallel", jobs],
                       check=True)

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


setup(
    version=project_version(),
    ext_modules=[Extension("perseus._perseus", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    # setuptools' own build folder would otherwise be build/, which is CMake's.
    options={"build": {"build_base": "build/setuptools"}, "egg_info": {"egg_base": "build"}},
    zip_safe=False,
)

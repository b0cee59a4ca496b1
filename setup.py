"""Builds the Python package onnx_rewrite for pip (metadata: pyproject.toml; docs/python.md).

The extension onnx_rewrite._core is built by CMake from this tree (python/CMakeLists.txt: the
same library as the tool, with pybind11) for the interpreter running pip, in build-python/ (or
$ONNX_REWRITE_PYTHON_BUILD_DIR; kept, so that a second install only relinks). Offline, with
Debian's packages only (cmake, g++, libonnx-dev, libprotobuf-dev, libfmt-dev, libcli11-dev,
pybind11-dev, python3-dev, python3-setuptools, python3-wheel: scripts/bootstrap.sh installs them):

    python3 -m pip install --user --break-system-packages --no-build-isolation --no-index .

$CMAKE_BUILD_PARALLEL_LEVEL sets the compile jobs (default: one per core);
$CMAKE_CXX_COMPILER_LAUNCHER=ccache is honoured by CMake.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def project_version() -> str:
    match = re.search(r"project\(onnx_rewrite VERSION ([0-9.]+)", (ROOT / "CMakeLists.txt").read_text())
    if not match:
        raise RuntimeError("CMakeLists.txt: no `project(onnx_rewrite VERSION x.y.z)`")
    return match.group(1)


class CMakeExtension(Extension):
    """An extension CMake builds: its sources are CMake's business."""

    def __init__(self, name: str, target: str) -> None:
        super().__init__(name, sources=[])
        self.target = target


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        cmake = shutil.which("cmake")
        if cmake is None:
            sys.exit("onnx_rewrite: building needs CMake: apt-get install cmake (scripts/bootstrap.sh installs "
                     "everything the build needs)")
        build_dir = BUILD
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        configure = [
            cmake, "-S", str(ROOT), "-B", str(build_dir),
            "-DCMAKE_BUILD_TYPE=Release",
            "-DBUILD_TESTING=OFF",
            "-DONNX_REWRITE_PYTHON=ON",
            "-DONNX_REWRITE_MIMALLOC=OFF",  # only the tool links it, and the tool is not built here
            f"-DPython3_EXECUTABLE={sys.executable}",
        ]
        subprocess.run(configure, check=True)
        subprocess.run([cmake, "--build", str(build_dir), "--target", ext.target, "-j", jobs], check=True)
        built = sorted((build_dir / "python" / "onnx_rewrite").glob("_core*.so"))
        if len(built) != 1:
            raise RuntimeError(f"expected one onnx_rewrite/_core*.so in {build_dir / 'python'}, found {built}")
        destination = Path(self.get_ext_fullpath(ext.name))
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[0], destination)


BUILD = Path(os.environ.get("ONNX_REWRITE_PYTHON_BUILD_DIR") or ROOT / "build-python").resolve()
BUILD.mkdir(parents=True, exist_ok=True)

setup(
    version=project_version(),
    ext_modules=[CMakeExtension("onnx_rewrite._core", target="onnx_rewrite_python")],
    cmdclass={"build_ext": CMakeBuild},
    # Not build/, CMake's build tree of the tool (README.md), nor the source tree: all in BUILD.
    options={"build": {"build_base": str(BUILD / "setuptools")}, "egg_info": {"egg_base": str(BUILD)}},
    zip_safe=False,
)

"""Packaging for tedsl.  Every dependency installs from wheels; no compiler is needed."""
import re
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent


def read_version():
    """The ``__version__`` string of ``tedsl/__init__.py``, parsed without importing tedsl."""
    text = (HERE / "tedsl" / "__init__.py").read_text(encoding="utf-8")
    match = re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', text, re.MULTILINE)
    if match is None:
        raise RuntimeError("tedsl/__init__.py defines no __version__")
    return match.group(1)


NVRTC = "nvidia-cuda-nvrtc==13.0.*"

setup(
    name="tedsl",
    version=read_version(),
    description="Tensor expressions and schedules in the style of TVM's te: loops derived by "
                "isl, compiled by LLVM (CPU) and NVRTC (CUDA)",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["tedsl", "tedsl.*"]),
    python_requires=">=3.10",
    install_requires=[
        "numpy>=2.0",
        "islpy>=2026.2",
        "llvmlite>=0.50",
        "cffi>=2.0",
    ],
    extras_require={
        "test": ["pytest>=8", "pytest-xdist>=3", NVRTC],
        "cuda": [NVRTC],
        "torch": ["torch>=2.4"],
        # plots of the benchmarks' sweeps and of tune.auto's search (skipped with a note without it)
        "plot": ["matplotlib>=3.8"],
    },
    entry_points={
        "console_scripts": ["tedsl = tedsl.cli:main"],
        # torch.compile(model, backend="tedsl") finds the backend here without importing tedsl
        "torch_dynamo_backends": ["tedsl = tedsl.torch.backend:tedsl_backend"],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Operating System :: POSIX :: Linux",
        "Topic :: Software Development :: Compilers",
    ],
)

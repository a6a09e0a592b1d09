"""Tests of Device, NDArray and DLPack interchange (CPU; CUDA parts need a GPU)."""

import gc
import sys

import numpy as np
import pytest

from tedsl.errors import ArgumentError, ShapeError
from tedsl.runtime import dlpack
from tedsl.runtime import ndarray as nd
from tedsl.runtime.cuda import driver
from tedsl.runtime.device import Device, cpu, cuda, device, from_dlpack_device

requires_gpu = pytest.mark.skipif(not driver.is_available(),
                                  reason="needs a CUDA GPU: " + str(driver.unavailable_reason()))

NUMPY_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                "float16", "float32", "float64"]


def random_array(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), size=shape, dtype=dtype)
    return (rng.standard_normal(shape) * 10).astype(dtype)


# ----------------------------------------------------------------------------------------
# Device


def test_device_values():
    assert cpu() == Device("cpu") == cpu(0)
    assert cuda(1) == Device("cuda", 1) != cuda(0)
    assert cpu() != cuda(0)
    assert len({cpu(), cpu(), cuda(0), cuda(0), cuda(1)}) == 3
    assert repr(cuda(1)) == "cuda(1)" and repr(cpu()) == "cpu(0)"
    assert cpu().kind == "cpu" and cuda(2).kind == "cuda" and cuda(2).index == 2
    assert cpu().dlpack == (1, 0) and cuda(3).dlpack == (2, 3)
    assert cpu().is_available()
    with pytest.raises(AttributeError):
        cpu().kind = "cuda"


def test_device_parsing():
    assert device("cpu") == cpu()
    assert device("cuda") == cuda(0) and device("cuda:1") == cuda(1) and device("GPU:2") == cuda(2)
    assert device((2, 1)) == cuda(1) and device((1, 0)) == cpu()
    assert from_dlpack_device(3, 0) == cpu()  # pinned host memory
    for bad in ("tpu", "cuda:x", (4, 0), 3.5):
        with pytest.raises(ArgumentError):
            device(bad)
    with pytest.raises(ArgumentError):
        cuda(-1)
    with pytest.raises(ArgumentError):
        cpu(1)


# ----------------------------------------------------------------------------------------
# NDArray on the CPU


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_array_copies_every_dtype(dtype):
    src = random_array((3, 5), dtype)
    arr = nd.array(src)
    assert arr.shape == (3, 5) and arr.dtype == dtype and arr.device == cpu()
    assert arr.ndim == 2 and arr.size == 15 and arr.nbytes == src.nbytes
    assert arr.strides == src.strides and len(arr) == 3
    assert arr.data_ptr == arr.numpy_view().ctypes.data
    np.testing.assert_array_equal(arr.numpy(), src)
    src.flat[0] = src.flat[1]  # the array owns a copy
    assert not np.shares_memory(arr.numpy_view(), src)


def test_array_makes_c_contiguous_copy():
    src = random_array((6, 4), "float32")
    arr = nd.array(src.T[::2])
    assert arr.numpy_view().flags.c_contiguous
    np.testing.assert_array_equal(arr.numpy(), src.T[::2])
    big_endian = nd.array(src.astype(">f8"))
    assert big_endian.dtype == "float64" and big_endian.numpy_view().dtype.isnative
    assert nd.array([[1, 2], [3, 4]], dtype="int8").dtype == "int8"


def test_numpy_is_a_copy_and_numpy_view_is_not():
    arr = nd.array(random_array((4,), "float64"))
    copy = arr.numpy()
    copy[0] = np.nan
    assert not np.isnan(arr.numpy_view()[0])
    arr.numpy_view()[1] = 123.0
    assert arr.numpy()[1] == 123.0


def test_array_interface_is_zero_copy():
    arr = nd.array(random_array((2, 3), "int32"))
    view = np.asarray(arr)
    assert np.shares_memory(view, arr.numpy_view())
    view[0, 0] = -77
    assert arr.numpy()[0, 0] == -77
    assert np.asarray(arr, dtype="float64").dtype == np.float64


def test_empty_and_copyfrom():
    arr = nd.empty((2, 3), "float32")
    assert arr.shape == (2, 3) and arr.dtype == "float32"
    src = random_array((2, 3), "float64")
    assert arr.copyfrom(src) is arr
    np.testing.assert_array_equal(arr.numpy(), src.astype(np.float32))
    with pytest.raises(ShapeError):
        arr.copyfrom(np.zeros((3, 2)))
    with pytest.raises(ArgumentError):
        arr.copyfrom(nd.array(src))  # NDArray sources must have the same dtype
    other = nd.array(random_array((2, 3), "float32", seed=5))
    arr.copyfrom(other)
    np.testing.assert_array_equal(arr.numpy(), other.numpy())
    assert nd.empty(5).shape == (5,) and nd.empty((0, 4)).nbytes == 0
    with pytest.raises(ShapeError):
        nd.empty((-1, 2))
    with pytest.raises(ArgumentError):
        nd.empty((2,), "complex64")
    with pytest.raises(ArgumentError):
        nd.empty((2,), "float32", "tpu")


def test_copyto_and_repr():
    arr = nd.array(np.arange(6, dtype=np.int16).reshape(2, 3))
    moved = arr.copyto(cpu())
    assert moved is not arr and moved.data_ptr != arr.data_ptr
    np.testing.assert_array_equal(moved.numpy(), arr.numpy())
    text = repr(arr)
    assert text.startswith("<tedsl.NDArray shape=(2, 3) dtype=int16 device=cpu(0)>")
    assert "[3, 4, 5]" in text
    assert "\n" not in repr(nd.empty((100, 100)))


def test_bfloat16_storage_and_rounding():
    values = np.array([1.0, -2.5, 3.140625, 1.0 + 2**-9, np.inf, np.nan], dtype=np.float32)
    arr = nd.array(values, dtype="bfloat16")
    assert arr.dtype == "bfloat16" and arr.itemsize == 2
    bits = arr.numpy()
    assert bits.dtype == np.uint16
    back = (bits.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(back[:4], [1.0, -2.5, 3.140625, 1.0])  # ties to even
    assert back[4] == np.inf and np.isnan(back[5])
    same = nd.array(arr)
    assert same.dtype == "bfloat16"
    np.testing.assert_array_equal(same.numpy(), bits)


# ----------------------------------------------------------------------------------------
# DLPack on the CPU


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_dlpack_round_trip_every_dtype(dtype):
    arr = nd.array(random_array((3, 4), dtype, seed=7))
    view = np.from_dlpack(arr)
    assert view.dtype == np.dtype(dtype) and view.shape == (3, 4)
    assert np.shares_memory(view, arr.numpy_view())
    back = nd.from_dlpack(view)
    assert back.dtype == dtype and back.data_ptr == arr.data_ptr


def test_tedsl_to_numpy_is_zero_copy_both_ways():
    arr = nd.array(random_array((5, 6), "float32"))
    view = np.from_dlpack(arr)
    view[1, 2] = 1234.5
    assert arr.numpy()[1, 2] == 1234.5
    arr.numpy_view()[4, 5] = -9.0
    assert view[4, 5] == -9.0
    del arr  # the numpy view keeps the memory alive
    gc.collect()
    assert view[4, 5] == -9.0


def test_numpy_to_tedsl_is_zero_copy_both_ways():
    src = random_array((7, 3), "int64")
    arr = nd.from_dlpack(src)
    assert arr.shape == (7, 3) and arr.dtype == "int64" and arr.device == cpu()
    assert arr.data_ptr == src.ctypes.data
    src[0, 0] = 99
    assert arr.numpy()[0, 0] == 99
    arr.numpy_view()[6, 2] = -5
    assert src[6, 2] == -5
    assert np.asarray(arr).base is not None


def test_legacy_capsules_both_ways():
    class LegacyProducer:  # a DLPack 0.x producer: no max_version keyword
        def __init__(self, arr):
            self.arr = arr

        def __dlpack__(self, stream=None):
            return self.arr.__dlpack__()

        def __dlpack_device__(self):
            return self.arr.__dlpack_device__()

    arr = nd.array(random_array((4,), "float32"))
    capsule = arr.__dlpack__()
    assert "dltensor" in repr(capsule) and "versioned" not in repr(capsule)
    del capsule
    view = np.from_dlpack(LegacyProducer(arr))
    assert np.shares_memory(view, arr.numpy_view())
    assert not view.flags.writeable  # numpy cannot tell a legacy capsule is writable
    src = random_array((2, 3), "uint8")
    imported = nd.from_dlpack(LegacyProducer(src))
    assert imported.data_ptr == src.ctypes.data and not imported.read_only
    imported.numpy_view()[1, 1] = 201
    assert src[1, 1] == 201


def test_capsules_are_consumed_once():
    arr = nd.array(random_array((3,), "float64"))
    capsule = arr.__dlpack__(max_version=(1, 0))
    assert "dltensor_versioned" in repr(capsule)
    alias = nd.from_dlpack(capsule)
    assert alias.data_ptr == arr.data_ptr
    assert "used_dltensor_versioned" in repr(capsule)
    with pytest.raises(ArgumentError, match="already consumed"):
        nd.from_dlpack(capsule)
    with pytest.raises(ArgumentError):
        nd.from_dlpack(object())


def test_held_capsule_outlives_producer_and_sweeps():
    src = random_array((16,), "float32", seed=3)
    capsule = nd.array(src).__dlpack__(max_version=(1, 0))  # the NDArray dies at once
    legacy = nd.array(src).__dlpack__()
    for _ in range(3):
        gc.collect()
        dlpack.live_exports()
        nd.array(src).__dlpack__()  # exports sweep abandoned capsules
    np.testing.assert_array_equal(nd.from_dlpack(capsule).numpy(), src)
    np.testing.assert_array_equal(np.from_dlpack(_CapsuleHolder(legacy)), src)


class _CapsuleHolder:
    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, stream=None):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)


def test_threads_share_dlpack_safely():
    import threading

    src = random_array((32,), "int32", seed=4)
    failures = []

    def work():
        try:
            for _ in range(200):
                arr = nd.array(src)
                back = nd.from_dlpack(np.from_dlpack(arr))
                assert back.data_ptr == arr.data_ptr
                arr.__dlpack__(max_version=(1, 0))
        except Exception as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gc.collect()
    assert not failures


def test_non_contiguous_is_refused():
    src = random_array((4, 6), "float32")
    for view in (src.T, src[:, ::2], src[::2]):
        with pytest.raises(ArgumentError, match="non-contiguous"):
            nd.from_dlpack(view)
    assert nd.from_dlpack(src[1:3]).shape == (2, 6)  # a contiguous slice is fine
    assert nd.from_dlpack(src[:, 1:2].reshape(4, 1)[:1]).shape == (1, 1)


def test_read_only_arrays():
    src = random_array((3,), "float32")
    src.flags.writeable = False
    arr = nd.from_dlpack(src)
    assert arr.read_only and not arr.numpy_view().flags.writeable
    with pytest.raises(ArgumentError):
        arr.copyfrom(np.zeros(3))
    out = np.from_dlpack(arr)  # versioned export carries the read-only flag
    assert not out.flags.writeable
    with pytest.raises(BufferError):
        arr.__dlpack__()  # a legacy capsule cannot say read-only


def test_zero_dim_and_empty_arrays():
    scalar = nd.array(np.float64(2.5))
    assert scalar.shape == () and np.from_dlpack(scalar)[()] == 2.5
    assert nd.from_dlpack(np.array(7, dtype=np.int32)).numpy()[()] == 7
    empty = nd.empty((0, 3), "int8")
    assert np.from_dlpack(empty).shape == (0, 3)
    assert nd.from_dlpack(np.zeros((2, 0))).shape == (2, 0)


def test_bfloat16_dlpack():
    arr = nd.array(np.array([1.0, 2.0], np.float32), dtype="bfloat16")
    again = nd.from_dlpack(arr.__dlpack__(max_version=(1, 0)))
    assert again.dtype == "bfloat16" and again.data_ptr == arr.data_ptr
    before = dlpack.live_exports()
    with pytest.raises(Exception) as info:
        np.from_dlpack(arr)  # numpy has no bfloat16: its own error must survive
    assert not isinstance(info.value, SystemError)
    assert dlpack.live_exports() <= before


def test_dlpack_device_and_copy_requests():
    arr = nd.array(random_array((2, 2), "float32"))
    assert arr.__dlpack_device__() == (1, 0)
    copied = np.from_dlpack(arr, copy=True)
    assert not np.shares_memory(copied, arr.numpy_view())
    np.testing.assert_array_equal(copied, arr.numpy())
    shared = np.from_dlpack(arr, copy=False)
    assert np.shares_memory(shared, arr.numpy_view())


def test_repeated_round_trips_do_not_leak():
    src = random_array((64,), "float32")
    gc.collect()
    refs_before = sys.getrefcount(src)
    exports_before = dlpack.live_exports()
    for i in range(1000):
        arr = nd.from_dlpack(src)
        view = np.from_dlpack(arr)
        again = nd.from_dlpack(view)
        again.numpy_view()[i % 64] = i
        capsule = arr.__dlpack__(max_version=(1, 0))  # dropped without being consumed
        legacy = arr.__dlpack__()
        del arr, view, again, capsule, legacy
        if i % 100 == 0:
            gc.collect()
    gc.collect()
    assert src[999 % 64] == 999
    assert sys.getrefcount(src) == refs_before  # every numpy deleter ran
    assert dlpack.live_exports() == exports_before  # every tedsl export was released


def test_interpreter_exit_with_live_exports_is_clean():
    import os
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = ("import numpy as np\n"
            "from tedsl.runtime import ndarray as nd\n"
            "a = nd.array(np.arange(10.0))\n"
            "views = [np.from_dlpack(a) for _ in range(5)]\n"
            "held = [a.__dlpack__(max_version=(1, 0)), a.__dlpack__()]\n"
            "imported = nd.from_dlpack(np.ones(4))\n"
            "cycle = [imported]; cycle.append(cycle)\n"
            "print('done')\n")
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=root, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr
    assert proc.stderr == ""


# ----------------------------------------------------------------------------------------
# CUDA arrays


@requires_gpu
def test_cuda_array_round_trip():
    host = random_array((33, 17), "float32", seed=21)
    arr = nd.array(host, device=cuda(0))
    assert arr.device == cuda(0) and arr.__dlpack_device__() == (2, 0)
    assert driver.pointer_device_ordinal(arr.data_ptr) == 0
    np.testing.assert_array_equal(arr.numpy(), host)
    other = nd.empty(host.shape, "float32", cuda(0))
    other.copyfrom(np.full(host.shape, np.nan, np.float32))
    other.copyfrom(arr)
    np.testing.assert_array_equal(other.copyto(cpu()).numpy(), host)
    np.testing.assert_array_equal(np.asarray(other), host)


@requires_gpu
@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_cuda_array_dtypes(dtype):
    host = random_array((5, 3), dtype, seed=22)
    np.testing.assert_array_equal(nd.array(host, device="cuda:0").numpy(), host)


@requires_gpu
def test_cuda_dlpack_round_trip_and_free():
    host = random_array((1000,), "float64", seed=23)
    arr = nd.array(host, device=cuda(0))
    assert nd.from_dlpack(arr) is arr
    alias = nd.from_dlpack(arr.__dlpack__(max_version=(1, 0)))
    assert alias.data_ptr == arr.data_ptr and alias.device == cuda(0)
    np.testing.assert_array_equal(alias.numpy(), host)
    on_host = nd.from_dlpack(arr.__dlpack__(max_version=(1, 0), dl_device=(1, 0)))
    np.testing.assert_array_equal(on_host.numpy_view(), host)
    free_before, _ = driver.mem_get_info()
    for _ in range(20):
        big = nd.empty((64, 1024, 1024), "uint8", cuda(0))  # 64 MiB each
        nd.from_dlpack(big.__dlpack__(max_version=(1, 0)))
        del big
    gc.collect()
    free_after, _ = driver.mem_get_info()
    assert free_before - free_after < 256 << 20  # freed as the arrays died
    del arr, alias

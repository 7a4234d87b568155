import pytest

import mgpu
from mgpu.hardware import DeviceError, parse_devices

mx = mgpu.mx


def test_cpu_fallback_gives_distinct_devices():
    if mgpu.num_gpus():
        pytest.skip("this machine has GPUs")
    assert mgpu.devices(3) == [mx.cpu(0), mx.cpu(1), mx.cpu(2)]
    assert mgpu.devices() == [mx.cpu(0)]
    assert mgpu.try_gpu(0) == mx.cpu()
    assert mgpu.try_all_gpus() == [mx.cpu()]


def test_env_override(monkeypatch):
    monkeypatch.setenv("MGPU_DEVICES", "cpu:4")
    assert mgpu.devices() == [mx.cpu(i) for i in range(4)]
    assert mgpu.devices(2) == [mx.cpu(0), mx.cpu(1)]
    with pytest.raises(DeviceError, match="provides 4"):
        mgpu.devices(5)


def test_missing_gpus_are_an_error_not_a_fallback(monkeypatch):
    have = mgpu.num_gpus()
    monkeypatch.setenv("MGPU_DEVICES", f"gpu:{have + 1}")
    with pytest.raises(DeviceError, match=f"this machine has {have} GPU"):
        mgpu.devices()


@pytest.mark.parametrize("spec", ["", "cpu", "cpu:0", "gpu:0,0", "cuda:1", "cpu:x"])
def test_bad_specs(spec):
    with pytest.raises(DeviceError):
        parse_devices(spec)


def test_zero_devices():
    with pytest.raises(DeviceError, match="at least one"):
        mgpu.devices(0)


def test_hardware_summary_names_cores_and_mxnet():
    s = mgpu.hardware_summary()
    assert "cores" in s and mx.__version__ in s

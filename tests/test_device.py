import pytest
import torch

from autogradlab import device


def test_pick_device_auto_returns_first_available():
    assert device.pick_device("auto").type == device.available_devices()[0]
    assert device.pick_device(None).type == device.available_devices()[0]


def test_pick_device_cpu_always_works():
    assert device.pick_device("cpu") == torch.device("cpu")
    assert device.pick_device(torch.device("cpu")) == torch.device("cpu")


def test_unknown_device_is_a_clear_error():
    with pytest.raises(ValueError, match="choose one of"):
        device.pick_device("tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_unavailable_device_names_what_is_available():
    with pytest.raises(ValueError, match="not available here; available: .*cpu"):
        device.pick_device("cuda")


def test_bf16_support_is_measured_consistently_with_autocast():
    supported = device.bf16_autocast_supported("cpu")
    a = torch.ones(2, 2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert supported == ((a @ a).dtype == torch.bfloat16)


def test_banner_is_one_line_with_device_version_and_bf16():
    text = device.banner("cpu")
    assert "\n" not in text
    assert text.startswith("device: cpu (")
    assert f"torch {torch.__version__}" in text
    assert text.endswith(("bf16 autocast: yes", "bf16 autocast: no"))

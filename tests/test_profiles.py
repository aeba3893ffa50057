"""Every GPU profile data file loads, is named after its file, and has sane numbers."""

import pytest

from memcalc.errors import MemcalcError
from memcalc.profiles import list_profiles, load_profile

REQUIRED = {
    "v100-sxm2-16gb",
    "v100-sxm2-32gb",
    "t4-16gb",
    "a10g-24gb",
    "l4-24gb",
    "l40s-48gb",
    "rtx-3090-24gb",
    "rtx-4090-24gb",
    "a100-sxm-40gb",
    "a100-sxm-80gb",
    "h100-sxm-80gb",
    "h100-pcie-80gb",
    "h200-sxm-141gb",
    "b200-180gb",
    "mi250x-128gb",
    "mi300x-192gb",
}


def test_at_least_the_required_profiles():
    assert REQUIRED <= set(list_profiles())


@pytest.mark.parametrize("name", sorted(list_profiles()))
def test_profile_is_valid(name):
    p = load_profile(name)
    assert p.name == name
    assert 10 * 2**30 < p.memory_bytes < 300 * 2**30
    assert p.fp16_flops_per_s >= p.fp32_flops_per_s > 0
    assert 5e9 <= p.host_link_bytes_per_s <= 1e12
    assert p.source.strip()


def test_user_profile_file_and_bad_keys(tmp_path):
    text = tmp_path / "x.toml"
    good = load_profile("h100-sxm-80gb").model_dump()
    good["name"] = "x"
    lines = [f"{k} = {v!r}" if not isinstance(v, str) else f'{k} = "{v}"' for k, v in good.items()]
    text.write_text("\n".join(lines) + "\n")
    assert load_profile(str(text)).memory_bytes == good["memory_bytes"]
    text.write_text("\n".join(lines) + "\nwatts = 700\n")
    with pytest.raises(MemcalcError, match="watts: unknown key"):
        load_profile(str(text))

"""Every GPU profile data file loads, is named after its file, sets every field with a source,
and has sane numbers; aliases, near-miss suggestions and minimal custom profiles work."""

import sys

import pytest

import memcalc.profiles as profiles_module
from memcalc.errors import MemcalcError
from memcalc.profiles import (
    ALIASES,
    FIELDS,
    REFERENCE_PROFILE,
    adhoc_profile,
    list_profiles,
    load_profile,
    reference_defaults,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

GIB = 2**30

REQUIRED = {
    "v100-sxm2-16gb",
    "v100-sxm2-32gb",
    "t4-16gb",
    "a10g-24gb",
    "l4-24gb",
    "l40-48gb",
    "l40s-48gb",
    "a40-48gb",
    "rtx-a6000-48gb",
    "rtx-6000-ada-48gb",
    "rtx-3090-24gb",
    "rtx-4090-24gb",
    "rtx-5090-32gb",
    "a100-sxm-40gb",
    "a100-sxm-80gb",
    "h100-sxm-80gb",
    "h100-pcie-80gb",
    "h20-96gb",
    "h200-sxm-141gb",
    "gh200-96gb",
    "gh200-144gb",
    "b200-180gb",
    "b300-288gb",
    "mi250x-128gb",
    "mi300x-192gb",
    "mi325x-256gb",
}

# Links that join GPUs directly (not through the host's PCIe): these must beat the host link.
DIRECT_LINKS = ("NVLink", "Infinity Fabric")


def test_at_least_the_required_profiles():
    assert REQUIRED <= set(list_profiles())


@pytest.mark.parametrize("name", sorted(list_profiles()))
def test_profile_is_valid(name):
    p = load_profile(name)
    assert p.name == name
    assert 8 * GIB <= p.memory_bytes < 300 * GIB
    assert p.fp16_flops_per_s >= p.fp32_flops_per_s > 0
    assert 5e9 <= p.host_link_bytes_per_s <= 1e12
    assert p.source.strip() and "http" in p.source


@pytest.mark.parametrize("name", sorted(list_profiles()))
def test_profile_file_sets_every_field(name):
    """Built-in profiles never lean on the reference defaults: every field is in the file."""
    keys = set(tomllib.loads(list_profiles()[name].read_text(encoding="utf-8")))
    assert set(FIELDS) - keys == set()
    assert load_profile(name).defaulted_fields() == ()


@pytest.mark.parametrize("name", sorted(list_profiles()))
def test_flops_are_ordered(name):
    p = load_profile(name)
    if p.fp8_flops_per_s:
        assert p.fp8_flops_per_s >= p.bf16_flops_per_s > 0
        assert p.fp8_flops_per_s >= p.fp16_flops_per_s
    if p.bf16_flops_per_s:
        assert p.bf16_flops_per_s >= p.tf32_flops_per_s
        assert p.bf16_flops_per_s == p.fp16_flops_per_s  # every part here runs them at one rate
    if p.tf32_flops_per_s:
        assert p.tf32_flops_per_s >= p.fp32_flops_per_s


@pytest.mark.parametrize("name", sorted(list_profiles()))
def test_server_fields_are_sane(name):
    p = load_profile(name)
    assert 1 <= p.gpus_per_node <= 16
    assert p.intra_node_link.strip() and p.inter_node_link.strip()
    if p.intra_node_link.startswith(DIRECT_LINKS):
        assert p.intra_node_bytes_per_s >= p.host_link_bytes_per_s
    else:  # over PCIe, peers get at most the host-link rate
        assert p.intra_node_link.startswith("PCIe")
        assert p.intra_node_bytes_per_s <= p.host_link_bytes_per_s
    assert p.intra_node_bytes_per_s < p.memory_bandwidth_bytes_per_s
    assert 0.1e9 <= p.inter_node_bytes_per_s <= 200e9
    assert p.inter_node_bytes_per_s <= p.intra_node_bytes_per_s
    assert 16 * GIB <= p.host_memory_bytes_per_gpu <= 1024 * GIB
    assert 1e7 <= p.cpu_adam_params_per_s <= 1e10
    assert (p.nvme_bytes_per_s == 0) == (p.nvme_bytes_per_gpu == 0)
    if p.nvme_bytes_per_gpu:
        assert 0.1e9 <= p.nvme_bytes_per_s <= 20e9
        assert p.nvme_bytes_per_gpu >= 100 * 10**9


def test_reference_h100_server():
    """DGX H100 (DGX BasePOD reference architecture): NVLink 4 450 GB/s per direction, one
    400 Gb/s NIC per GPU, 2 TB / 8 GPUs, 8x 3.84 TB NVMe / 8 GPUs."""
    p = load_profile("h100-sxm-80gb")
    assert p.gpus_per_node == 8
    assert p.intra_node_bytes_per_s == 450e9
    assert p.inter_node_bytes_per_s == 400e9 / 8
    assert p.host_memory_bytes_per_gpu == 2 * 1024 * GIB // 8
    assert p.nvme_bytes_per_gpu == 8 * 3_840_000_000_000 // 8


def test_every_alias_resolves_to_an_existing_profile():
    assert set(ALIASES.values()) <= set(list_profiles())
    assert all(alias == alias.lower() for alias in ALIASES)
    assert not set(ALIASES) & set(list_profiles())  # an alias never shadows an id


@pytest.mark.parametrize(
    "typed,expected",
    [
        ("h100", "h100-sxm-80gb"),
        ("H100", "h100-sxm-80gb"),
        ("a100", "a100-sxm-80gb"),
        ("4090", "rtx-4090-24gb"),
        ("RTX4090", "rtx-4090-24gb"),
        ("5090", "rtx-5090-32gb"),
        ("A6000", "rtx-a6000-48gb"),
        ("L40S", "l40s-48gb"),
        ("h200", "h200-sxm-141gb"),
        ("B200", "b200-180gb"),
        ("MI300X", "mi300x-192gb"),
        ("t4", "t4-16gb"),
        ("V100", "v100-sxm2-16gb"),
        ("H100-SXM-80GB", "h100-sxm-80gb"),
        (" h100 ", "h100-sxm-80gb"),
    ],
)
def test_alias_and_id_lookup_is_case_insensitive(typed, expected):
    assert load_profile(typed).name == expected


@pytest.mark.parametrize(
    "typed,suggestion",
    [("h1000", "h100-sxm-80gb"), ("a6001", "rtx-a6000-48gb"), ("mi300", "mi300x-192gb")],
)
def test_near_miss_suggests_one_profile_on_one_line(typed, suggestion):
    with pytest.raises(MemcalcError) as e:
        load_profile(typed)
    message = str(e.value)
    assert message.startswith(
        f"--gpu: unknown value {typed!r}; did you mean {suggestion!r}? choose one of: "
    )
    assert "h100-sxm-80gb" in message.split("choose one of: ")[1]
    assert "\n" not in message


def test_far_miss_lists_the_choices_without_a_guess():
    with pytest.raises(MemcalcError, match=r"^--gpu: unknown value 'nope'; choose one of: a100"):
        load_profile("nope")


def test_loading_reads_only_the_one_file_asked_for(monkeypatch):
    read = []
    real = profiles_module.read_data_file
    monkeypatch.setattr(profiles_module, "read_data_file", lambda p: read.append(p) or real(p))
    load_profile("h100")
    assert read == [list_profiles()["h100-sxm-80gb"]]


def test_user_profile_file_and_bad_keys(tmp_path):
    text = tmp_path / "x.toml"
    good = load_profile("h100-sxm-80gb").fields()
    good["name"] = "x"
    lines = [f"{k} = {v!r}" if not isinstance(v, str) else f'{k} = "{v}"' for k, v in good.items()]
    text.write_text("\n".join(lines) + "\n")
    assert load_profile(str(text)).memory_bytes == good["memory_bytes"]
    text.write_text("\n".join(lines) + "\nwatts = 700\n")
    with pytest.raises(MemcalcError, match="watts: unknown key"):
        load_profile(str(text))


def test_minimal_custom_profile_takes_the_reference_defaults(tmp_path):
    path = tmp_path / "my-card.toml"
    path.write_text('name = "my-card"\nmemory_bytes = 48_000_000_000\n')
    p = load_profile(str(path))
    ref = load_profile(REFERENCE_PROFILE)
    assert p.name == "my-card" and p.display_name == "my-card"
    assert p.memory_bytes == 48 * 10**9
    assert set(p.defaulted_fields()) == set(FIELDS) - {"name", "memory_bytes"}
    for field in reference_defaults():
        assert getattr(p, field) == getattr(ref, field), field


def test_reference_defaults_are_the_reference_profile_figures():
    """Each listed default equals the value in profiles/h100-sxm-80gb.toml."""
    ref = load_profile(REFERENCE_PROFILE)
    defaults = reference_defaults()
    assert set(defaults) == set(FIELDS) - {
        "name",
        "memory_bytes",
        "display_name",
        "source",
        "notes",
    }
    assert defaults == {field: getattr(ref, field) for field in defaults}


def test_custom_profile_without_name_uses_the_file_stem_and_accepts_a_float(tmp_path):
    path = tmp_path / "rented-48g.toml"
    path.write_text("memory_bytes = 48e9\ngpus_per_node = 4\n")
    p = load_profile(str(path))
    assert (p.name, p.memory_bytes, p.gpus_per_node) == ("rented-48g", 48 * 10**9, 4)
    assert "gpus_per_node" not in p.defaulted_fields()


def test_custom_profile_must_give_memory(tmp_path):
    path = tmp_path / "nomem.toml"
    path.write_text('name = "nomem"\n')
    with pytest.raises(MemcalcError, match="memory_bytes: missing"):
        load_profile(str(path))


def test_adhoc_profile_and_with_memory():
    p = adhoc_profile(48 * 10**9)
    assert p.name == "custom@48GB"
    assert p.memory_bytes == 48 * 10**9
    assert p.bf16_flops_per_s == load_profile(REFERENCE_PROFILE).bf16_flops_per_s
    q = load_profile("mi300x").with_memory(40 * GIB)
    assert (q.name, q.memory_bytes, q.vendor) == ("mi300x-192gb@40GiB", 40 * GIB, "amd")
    assert q.bf16_flops_per_s == load_profile("mi300x").bf16_flops_per_s
    with pytest.raises(MemcalcError, match="--gpu-memory: must be more than 0 bytes"):
        adhoc_profile(0)

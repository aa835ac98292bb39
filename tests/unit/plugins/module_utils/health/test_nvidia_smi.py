"""The nvidia-smi -q -x parser on real reports of four driver generations, derived copies for
the faults they lack, and bad input. Each fixture's .about file names its source and the facts
asserted here."""

from __future__ import annotations

import pathlib

import pytest

from ansible_collections.gpuops.training.plugins.module_utils.health.nvidia_smi import (
    ISOLATE,
    MONITOR,
    REBOOT,
    NvidiaSmiError,
    findings,
    normalize_pci,
    parse_nvidia_smi_xml,
)

REPO_ROOT = pathlib.Path(__file__).resolve().parents[5]
FIXTURES = REPO_ROOT / "tests" / "unit" / "fixtures" / "health"


def parse(name: str) -> dict:
    return parse_nvidia_smi_xml((FIXTURES / name).read_text())


def checks(found: list[dict]) -> list[tuple[str, str, str]]:
    return [(item["device"], item["check"], item["class"]) for item in found]


def test_every_xml_fixture_has_an_about_file():
    xml_files = sorted(FIXTURES.glob("*.xml"))
    assert len(xml_files) == 7
    for path in xml_files:
        assert path.with_name(path.name + ".about").is_file(), path.name


def test_p100_older_schema_identity_and_header():
    report = parse("nvidia-smi-tesla-p100-r510.xml")
    assert report["driver_version"] == "510.47.03"
    assert report["cuda_version"] == "11.6"
    assert report["attached_gpus"] == 1
    assert len(report["gpus"]) == 1
    gpu = report["gpus"][0]
    assert gpu["index"] == 0
    assert gpu["minor_number"] == 0
    assert gpu["pci_bus_id"] == "00000000:00:04.0"
    assert gpu["pci"] == "0000:00:04.0"
    assert gpu["product_name"] == "Tesla P100-PCIE-16GB"
    assert gpu["uuid"] == "GPU-d3da8716-eaab-75db-efc1-60e88e1cd55e"
    assert gpu["driver_version"] == "510.47.03"
    assert gpu["cuda_version"] == "11.6"


def test_p100_single_bit_double_bit_ecc_and_retired_pages():
    gpu = parse("nvidia-smi-tesla-p100-r510.xml")["gpus"][0]
    assert gpu["ecc_mode"] == "Enabled"
    assert gpu["ecc"] == {
        "volatile": {"correctable": 0, "uncorrectable": 0},
        "aggregate": {"correctable": 3, "uncorrectable": 0},
    }
    assert gpu["retired_pages"] == {"single_bit": 0, "double_bit": 0, "pending": False}
    # <remapped_rows>N/A</remapped_rows>: Pascal has no row remapping.
    assert gpu["remapped_rows"] is None
    assert gpu["pcie"] == {"gen_current": 3, "gen_max": 3, "width_current": 16, "width_max": 16}
    assert gpu["clock_reasons_active"] == ["gpu_idle"]
    assert len(gpu["clock_reasons_listed"]) == 9
    assert "hw_power_brake_slowdown" in gpu["clock_reasons_listed"]


def test_p100_is_healthy_and_only_the_gpu_count_is_judged():
    report = parse("nvidia-smi-tesla-p100-r510.xml")
    # Aggregate correctable (single-bit) errors alone are corrected errors: no finding.
    assert findings(report) == []
    assert findings(report, expected_gpus=1) == []
    found = findings(report, expected_gpus=8)
    assert checks(found) == [("node", "gpu_count", ISOLATE)]
    assert "1 GPU(s), 8 expected" in found[0]["reason"]


def test_a10g_transitional_schema_throttle_reasons_with_remapped_rows():
    report = parse("nvidia-smi-a10g-r515.xml")
    assert (report["driver_version"], report["cuda_version"]) == ("515.105.01", "11.7")
    gpu = report["gpus"][0]
    assert gpu["pci"] == "0000:00:1e.0"
    assert gpu["uuid"] == "GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94"
    assert gpu["ecc"]["volatile"] == {"correctable": 0, "uncorrectable": 0}
    # Every retired_pages value reads N/A: unknown, not zero.
    assert gpu["retired_pages"] == {"single_bit": None, "double_bit": None, "pending": None}
    assert gpu["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    assert gpu["pcie"] == {"gen_current": 1, "gen_max": 4, "width_current": 8, "width_max": 16}
    assert gpu["performance_state"] == "P8"
    assert gpu["gpu_util_percent"] == 0
    assert gpu["clock_reasons_active"] == ["gpu_idle"]


def test_a10g_narrow_link_is_judged_but_idle_generation_is_not():
    found = findings(parse("nvidia-smi-a10g-r515.xml"))
    assert checks(found) == [("GPU 0 (0000:00:1e.0)", "pcie_link_width", MONITOR)]
    assert "x8 of x16" in found[0]["reason"]


def test_a100_newer_schema_mig_and_partial_report():
    report = parse("nvidia-smi-a100-sxm4-r535.xml")
    assert (report["driver_version"], report["cuda_version"]) == ("535.54.03", "12.2")
    assert report["attached_gpus"] == 4
    assert len(report["gpus"]) == 1
    gpu = report["gpus"][0]
    assert (gpu["index"], gpu["minor_number"]) == (0, 1)
    assert gpu["product_name"] == "NVIDIA A100-SXM4-80GB"
    assert gpu["uuid"] == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert gpu["mig_mode"] == "Enabled"
    assert gpu["ecc"] == {
        "volatile": {"correctable": 0, "uncorrectable": 0},
        "aggregate": {"correctable": 0, "uncorrectable": 0},
    }
    assert gpu["remapped_rows"] is None
    assert gpu["gpu_util_percent"] is None
    assert gpu["pcie"] == {"gen_current": 4, "gen_max": 4, "width_current": 16, "width_max": 16}
    assert gpu["clock_reasons_active"] == []
    assert "gpu_idle" in gpu["clock_reasons_listed"]


def test_a100_partial_report_counts_the_driver_attached_gpus():
    report = parse("nvidia-smi-a100-sxm4-r535.xml")
    found = findings(report, expected_gpus=4)
    assert checks(found) == [("node", "report_coverage", MONITOR)]
    assert "1 of the 4 attached" in found[0]["reason"]
    assert checks(findings(report, expected_gpus=8))[0] == ("node", "gpu_count", ISOLATE)


def test_rtx4000_ada_newest_schema_with_ecc_disabled():
    report = parse("nvidia-smi-rtx4000-ada-r595.xml")
    assert (report["driver_version"], report["cuda_version"]) == ("595.84", "13.2")
    gpu = report["gpus"][0]
    assert gpu["pci"] == "0000:06:00.0"
    assert gpu["uuid"] == "GPU-37037c3f-65c8-ec4d-24a9-420204ad8026"
    assert gpu["ecc_mode"] == "Disabled"
    # ECC off: every counter N/A, which must read unknown, not 0.
    assert gpu["ecc"] == {
        "volatile": {"correctable": None, "uncorrectable": None},
        "aggregate": {"correctable": None, "uncorrectable": None},
    }
    assert gpu["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    assert gpu["pcie"] == {"gen_current": 1, "gen_max": 4, "width_current": 16, "width_max": 16}
    assert gpu["clock_reasons_active"] == ["gpu_idle"]
    assert findings(report, expected_gpus=1) == []


def test_derived_p100_double_bit_error_pending_retirement_and_hw_slowdown():
    report = parse("nvidia-smi-tesla-p100-r510-derived-dbe-retirement.xml")
    gpu = report["gpus"][0]
    assert gpu["ecc"]["volatile"] == {"correctable": 0, "uncorrectable": 1}
    assert gpu["ecc"]["aggregate"] == {"correctable": 3, "uncorrectable": 0}
    assert gpu["retired_pages"]["pending"] is True
    assert gpu["clock_reasons_active"] == ["gpu_idle", "hw_slowdown"]
    device = "GPU 0 (0000:00:04.0)"
    assert checks(findings(report)) == [
        (device, "ecc_uncorrectable_volatile", ISOLATE),
        (device, "retired_pages_pending", REBOOT),
        (device, "clock_hardware_slowdown", MONITOR),
    ]


def test_derived_a10g_remap_pending_and_failure():
    report = parse("nvidia-smi-a10g-r515-derived-remap-pending-failure.xml")
    assert report["gpus"][0]["remapped_rows"]["pending"] is True
    assert report["gpus"][0]["remapped_rows"]["failure"] is True
    device = "GPU 0 (0000:00:1e.0)"
    assert checks(findings(report)) == [
        (device, "row_remap_failure", ISOLATE),
        (device, "row_remap_pending", REBOOT),
        (device, "pcie_link_width", MONITOR),
    ]


def test_derived_a100_dram_uncorrectable_power_brake_and_narrow_link():
    report = parse("nvidia-smi-a100-sxm4-r535-derived-ecc-powerbrake.xml")
    gpu = report["gpus"][0]
    assert gpu["ecc"]["volatile"] == {"correctable": 0, "uncorrectable": 2}
    assert gpu["ecc"]["aggregate"] == {"correctable": 0, "uncorrectable": 2}
    assert gpu["pcie"]["width_current"] == 8
    assert gpu["clock_reasons_active"] == ["hw_power_brake_slowdown"]
    device = "GPU 0 (0000:01:00.0)"
    found = findings(report)
    assert checks(found) == [
        ("node", "report_coverage", MONITOR),
        (device, "ecc_uncorrectable_volatile", ISOLATE),
        (device, "pcie_link_width", MONITOR),
        (device, "clock_hardware_slowdown", MONITOR),
    ]
    for item in found:
        assert set(item) == {"device", "check", "class", "reason", "remedy"}
        assert item["reason"] and item["remedy"]


def _one_gpu(body: str, header: str = "") -> str:
    return "<nvidia_smi_log>%s<gpu id='00000000:3B:00.0'>%s</gpu></nvidia_smi_log>" % (header, body)


def test_generation_below_max_on_a_busy_gpu_is_judged():
    body = (
        "<performance_state>P0</performance_state><utilization><gpu_util>97 %</gpu_util></utilization>"
        "<pci><pci_gpu_link_info><pcie_gen><max_link_gen>5</max_link_gen><current_link_gen>3</current_link_gen>"
        "</pcie_gen><link_widths><max_link_width>16x</max_link_width><current_link_width>16x</current_link_width>"
        "</link_widths></pci_gpu_link_info></pci>"
    )
    found = findings(parse_nvidia_smi_xml(_one_gpu(body)))
    assert checks(found) == [("GPU 0 (0000:3b:00.0)", "pcie_link_generation", MONITOR)]
    assert "generation 3 of 5" in found[0]["reason"]


def test_aggregate_only_uncorrectable_is_monitor_and_split_sram_counters_add_up():
    body = (
        "<ecc_errors><volatile><sram_correctable>4</sram_correctable>"
        "<sram_uncorrectable_parity>0</sram_uncorrectable_parity><sram_uncorrectable_secded>0</sram_uncorrectable_secded>"
        "<dram_correctable>1</dram_correctable><dram_uncorrectable>0</dram_uncorrectable></volatile>"
        "<aggregate><sram_correctable>4</sram_correctable><sram_uncorrectable_parity>1</sram_uncorrectable_parity>"
        "<sram_uncorrectable_secded>2</sram_uncorrectable_secded><dram_correctable>1</dram_correctable>"
        "<dram_uncorrectable>N/A</dram_uncorrectable></aggregate></ecc_errors>"
    )
    report = parse_nvidia_smi_xml(_one_gpu(body))
    gpu = report["gpus"][0]
    assert gpu["ecc"]["volatile"] == {"correctable": 5, "uncorrectable": 0}
    assert gpu["ecc"]["aggregate"] == {"correctable": 5, "uncorrectable": 3}
    assert checks(findings(report)) == [("GPU 0 (0000:3b:00.0)", "ecc_uncorrectable_aggregate", MONITOR)]


def test_na_and_missing_elements_read_as_unknown_without_findings():
    body = (
        "<minor_number>N/A</minor_number><uuid>[N/A]</uuid>"
        "<ecc_errors><volatile><single_bit><total>N/A</total></single_bit><double_bit><total>N/A</total>"
        "</double_bit></volatile></ecc_errors><retired_pages>N/A</retired_pages>"
        "<remapped_rows><remapped_row_pending>N/A</remapped_row_pending></remapped_rows>"
        "<pci><pci_gpu_link_info><pcie_gen><max_link_gen>N/A</max_link_gen><current_link_gen>1</current_link_gen>"
        "</pcie_gen><link_widths><max_link_width>N/A</max_link_width><current_link_width>N/A</current_link_width>"
        "</link_widths></pci_gpu_link_info></pci><clocks_event_reasons>"
        "<clocks_event_reason_hw_slowdown>Not Active</clocks_event_reason_hw_slowdown>"
        "<clocks_event_reason_hw_thermal_slowdown>N/A</clocks_event_reason_hw_thermal_slowdown></clocks_event_reasons>"
    )
    report = parse_nvidia_smi_xml(_one_gpu(body, header="<driver_version>N/A</driver_version>"))
    gpu = report["gpus"][0]
    assert report["driver_version"] is None
    assert report["attached_gpus"] is None
    assert (gpu["minor_number"], gpu["uuid"]) == (None, None)
    # The bus id falls back to the <gpu id> attribute.
    assert gpu["pci"] == "0000:3b:00.0"
    assert gpu["ecc"]["volatile"] == {"correctable": None, "uncorrectable": None}
    assert gpu["ecc"]["aggregate"] == {"correctable": None, "uncorrectable": None}
    assert gpu["retired_pages"] is None
    unknown_rows = {"correctable": None, "uncorrectable": None, "pending": None, "failure": None}
    assert gpu["remapped_rows"] == unknown_rows
    assert gpu["pcie"] == {"gen_current": 1, "gen_max": None, "width_current": None, "width_max": None}
    assert gpu["clock_reasons_active"] == []
    assert findings(report) == []


def test_deprecated_texts_read_as_unknown():
    body = "<performance_state>Requested functionality has been deprecated</performance_state>"
    assert parse_nvidia_smi_xml(_one_gpu(body))["gpus"][0]["performance_state"] is None


def test_a_report_without_gpus_counts_zero():
    report = parse_nvidia_smi_xml("<nvidia_smi_log><attached_gpus>0</attached_gpus></nvidia_smi_log>")
    assert report["gpus"] == []
    assert checks(findings(report, expected_gpus=2)) == [("node", "gpu_count", ISOLATE)]


def test_bytes_are_accepted():
    data = (FIXTURES / "nvidia-smi-tesla-p100-r510.xml").read_bytes()
    assert parse_nvidia_smi_xml(data)["gpus"][0]["product_name"] == "Tesla P100-PCIE-16GB"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("  \n\t", "empty"),
        ("<nvidia_smi_log><gpu><uuid>GPU-1</uuid>", "not well-formed XML"),
        ("==============NVSMI LOG==============\nDriver Version : 535.54.03\n", "not well-formed XML"),
        ("<html><body>502 Bad Gateway</body></html>", "root is <html>"),
    ],
)
def test_bad_input_gives_a_clear_error(text, message):
    with pytest.raises(NvidiaSmiError, match=message):
        parse_nvidia_smi_xml(text)


def test_a_fixture_cut_in_the_middle_gives_a_clear_error():
    text = (FIXTURES / "nvidia-smi-a10g-r515.xml").read_text()
    with pytest.raises(NvidiaSmiError, match=r"line \d+, column \d+.*cut short"):
        parse_nvidia_smi_xml(text[: len(text) // 2])


def test_non_text_input_gives_a_clear_error():
    with pytest.raises(NvidiaSmiError, match="got NoneType"):
        parse_nvidia_smi_xml(None)


@pytest.mark.parametrize(
    ("bus_id", "expected"),
    [
        ("00000000:3B:00.0", "0000:3b:00.0"),
        ("0000:9b:00", "0000:9b:00.0"),
        ("PCI:0000:05:00.0", "0000:05:00.0"),
        ("0001:C1:00.1", "0001:c1:00.1"),
        ("...", "..."),
        (None, None),
    ],
)
def test_normalize_pci(bus_id, expected):
    assert normalize_pci(bus_id) == expected

# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read a saved ``nvidia-smi -q -x`` report and judge each GPU in it.

The XML has changed shape across driver branches, and every generation is still found on
nodes, so each field is looked up under all the names it has had:

- clock reasons: ``<clocks_throttle_reasons>`` (``clocks_throttle_reason_*``) up to the
  r535 branch, ``<clocks_event_reasons>`` (``clocks_event_reason_*``) after it;
- ECC counters under ``<ecc_errors><volatile>`` and ``<aggregate>``: ``<single_bit>`` and
  ``<double_bit>`` blocks with a ``<total>`` (Pascal and Volta era), or flat
  ``sram_correctable``/``sram_uncorrectable``/``dram_correctable``/``dram_uncorrectable``
  (Ampere on), where newer drivers split ``sram_uncorrectable`` into ``_parity`` and
  ``_secded``;
- ``<retired_pages>`` (dynamic page retirement, before Ampere) and ``<remapped_rows>`` (row
  remapping, Ampere on); the one a GPU does not use reads ``N/A``;
- PCIe ``max_link_gen``: on newer drivers the lower of the device's and the host's maximum.

``N/A``, ``[N/A]``, "Requested functionality has been deprecated" and missing elements all
read as unknown (None), never as 0: a counter nvidia-smi could not read is not a clean one.

Pure functions only; the standard library's ElementTree does the parsing. It does not fetch
the DTD the report names, and it refuses entity tricks through expat's own limits.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

ISOLATE = "isolate"
REBOOT = "reboot"
MONITOR = "monitor"

# Texts nvidia-smi prints for a value it cannot give.
_UNKNOWN_TEXTS = frozenset(["", "n/a", "[n/a]", "unknown error", "not supported", "[not supported]"])
_UNKNOWN_PREFIXES = ("requested functionality has been deprecated", "[unknown error]", "[gpu requires reset]")

# Clock reasons that mean the hardware itself slows the GPU: a thermal or power emergency,
# or an external signal (a PSU or the baseboard pulling the brake). sw_power_cap and
# sw_thermal_slowdown are the driver keeping the GPU inside its configured limits under
# load, normal on a busy node, so they are reported but not judged.
HARDWARE_SLOWDOWN_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")

_REASON_PREFIXES = ("clocks_event_reason_", "clocks_throttle_reason_")
_WIDTH = re.compile(r"^\s*(\d+)\s*x?\s*$", re.IGNORECASE)
_LEADING_INT = re.compile(r"^\s*(-?\d+)")


class NvidiaSmiError(ValueError):
    """The text is not an ``nvidia-smi -q -x`` report that can be read."""


def _known(text: str | None) -> str | None:
    """The element text stripped, or None when nvidia-smi says it has no value."""
    if text is None:
        return None
    value = text.strip()
    lowered = value.lower()
    if lowered in _UNKNOWN_TEXTS or lowered.startswith(_UNKNOWN_PREFIXES):
        return None
    return value


def _text(element: ET.Element | None, path: str) -> str | None:
    if element is None:
        return None
    found = element.find(path)
    return None if found is None else _known(found.text)


def _int(element: ET.Element | None, path: str) -> int | None:
    """An integer at ``path`` ("12", "12 %", "27 C" read as 12, 12, 27), or None."""
    value = _text(element, path)
    if value is None:
        return None
    match = _LEADING_INT.match(value)
    return int(match.group(1)) if match else None


def _yes_no(element: ET.Element | None, path: str) -> bool | None:
    value = _text(element, path)
    if value is None:
        return None
    lowered = value.lower()
    if lowered == "yes":
        return True
    if lowered == "no":
        return False
    return None


def _width(element: ET.Element | None, path: str) -> int | None:
    value = _text(element, path)
    if value is None:
        return None
    match = _WIDTH.match(value)
    return int(match.group(1)) if match else None


def _sum_known(values: list[int | None]) -> int | None:
    """The sum of the known values; None when none is known."""
    known = [value for value in values if value is not None]
    return sum(known) if known else None


def _ecc_scope(ecc_errors: ET.Element | None, scope: str) -> dict:
    """Correctable and uncorrectable counts of one scope (``volatile`` or ``aggregate``)."""
    block = None if ecc_errors is None else ecc_errors.find(scope)
    if block is None:
        return {"correctable": None, "uncorrectable": None}
    if block.find("single_bit") is not None or block.find("double_bit") is not None:
        # Older layout: single-bit errors are the corrected ones, double-bit the others.
        return {
            "correctable": _int(block, "single_bit/total"),
            "uncorrectable": _int(block, "double_bit/total"),
        }
    # Newer layout. A driver writes either sram_uncorrectable or its two halves.
    sram_uncorrectable = _int(block, "sram_uncorrectable")
    if sram_uncorrectable is None:
        sram_uncorrectable = _sum_known(
            [_int(block, "sram_uncorrectable_parity"), _int(block, "sram_uncorrectable_secded")]
        )
    return {
        "correctable": _sum_known([_int(block, "sram_correctable"), _int(block, "dram_correctable")]),
        "uncorrectable": _sum_known([sram_uncorrectable, _int(block, "dram_uncorrectable")]),
    }


def _retired_pages(gpu: ET.Element) -> dict | None:
    block = gpu.find("retired_pages")
    if block is None or (_known(block.text) is None and len(block) == 0):
        return None
    # pending_blacklist is the older name of pending_retirement; either says a retired page
    # waits for the next reattach of the driver (a GPU reset or a reboot).
    pending_values = [_yes_no(block, "pending_retirement"), _yes_no(block, "pending_blacklist")]
    pending = True if True in pending_values else (False if False in pending_values else None)
    return {
        "single_bit": _int(block, "multiple_single_bit_retirement/retired_count"),
        "double_bit": _int(block, "double_bit_retirement/retired_count"),
        "pending": pending,
    }


def _remapped_rows(gpu: ET.Element) -> dict | None:
    block = gpu.find("remapped_rows")
    # "<remapped_rows>N/A</remapped_rows>": a GPU without row remapping, or one in MIG mode.
    if block is None or len(block) == 0:
        return None
    return {
        "correctable": _int(block, "remapped_row_corr"),
        "uncorrectable": _int(block, "remapped_row_unc"),
        "pending": _yes_no(block, "remapped_row_pending"),
        "failure": _yes_no(block, "remapped_row_failure"),
    }


def _clock_reasons(gpu: ET.Element) -> tuple[list[str], list[str]]:
    """The clock reasons the report lists, and those marked Active, without their prefix."""
    block = gpu.find("clocks_event_reasons")
    if block is None:
        block = gpu.find("clocks_throttle_reasons")
    if block is None:
        return [], []
    listed, active = [], []
    for child in block:
        name = child.tag
        for prefix in _REASON_PREFIXES:
            if name.startswith(prefix):
                name = name[len(prefix) :]
                break
        listed.append(name)
        if (child.text or "").strip().lower() == "active":
            active.append(name)
    return listed, active


def normalize_pci(bus_id: str | None) -> str | None:
    """A PCI address as ``dddd:bb:dd.f`` in lower case, the form the kernel log can be matched on.

    nvidia-smi writes ``00000000:3B:00.0`` (an eight-digit domain), Xid lines ``0000:3b:00``
    (no function: a GPU is function 0), SXid lines ``0000:05:00.0``. Text that is not an
    address comes back as given.
    """
    if bus_id is None:
        return None
    match = re.match(
        r"^\s*(?:PCI:)?(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})(?:\.([0-7]))?\s*$",
        bus_id,
    )
    if not match:
        return bus_id
    domain, bus, device, function = match.groups()
    domain_value = int(domain, 16) if domain else 0
    return "%04x:%02x:%02x.%s" % (domain_value, int(bus, 16), int(device, 16), function or "0")


def _gpu(gpu: ET.Element, index: int, header: dict) -> dict:
    link = gpu.find("pci/pci_gpu_link_info")
    listed_reasons, active_reasons = _clock_reasons(gpu)
    bus_id = _text(gpu, "pci/pci_bus_id") or _known(gpu.get("id"))
    ecc_errors = gpu.find("ecc_errors")
    return {
        # nvidia-smi orders GPUs by PCI bus id, the order of its -i indexes (and, unless
        # CUDA_DEVICE_ORDER says otherwise, not necessarily CUDA's).
        "index": index,
        "minor_number": _int(gpu, "minor_number"),
        "pci_bus_id": bus_id,
        "pci": normalize_pci(bus_id),
        "product_name": _text(gpu, "product_name"),
        "uuid": _text(gpu, "uuid"),
        "driver_version": header["driver_version"],
        "cuda_version": header["cuda_version"],
        "performance_state": _text(gpu, "performance_state"),
        "gpu_util_percent": _int(gpu, "utilization/gpu_util"),
        "mig_mode": _text(gpu, "mig_mode/current_mig"),
        "ecc_mode": _text(gpu, "ecc_mode/current_ecc"),
        "ecc": {
            "volatile": _ecc_scope(ecc_errors, "volatile"),
            "aggregate": _ecc_scope(ecc_errors, "aggregate"),
        },
        "retired_pages": _retired_pages(gpu),
        "remapped_rows": _remapped_rows(gpu),
        "pcie": {
            "gen_current": _int(link, "pcie_gen/current_link_gen"),
            "gen_max": _int(link, "pcie_gen/max_link_gen"),
            "width_current": _width(link, "link_widths/current_link_width"),
            "width_max": _width(link, "link_widths/max_link_width"),
        },
        "clock_reasons_listed": listed_reasons,
        "clock_reasons_active": active_reasons,
    }


def parse_nvidia_smi_xml(text: str | bytes) -> dict:
    """Parse an ``nvidia-smi -q -x`` report into its header and one dict per GPU.

    Raises NvidiaSmiError, naming the problem, for empty text, XML that does not parse
    (a cut-off file) and XML whose root is not ``<nvidia_smi_log>``.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if not isinstance(text, str):
        raise NvidiaSmiError("expected the text of an nvidia-smi -q -x report, got %s" % type(text).__name__)
    if not text.strip():
        raise NvidiaSmiError("the nvidia-smi report is empty")
    try:
        root = ET.fromstring(text.strip())
    except ET.ParseError as error:
        line, column = error.position
        raise NvidiaSmiError(
            "the nvidia-smi report is not well-formed XML (line %d, column %d: %s); "
            "was the file cut short or is it the plain-text nvidia-smi -q output?" % (line, column, error)
        ) from None
    if root.tag != "nvidia_smi_log":
        raise NvidiaSmiError(
            "the XML root is <%s>, not <nvidia_smi_log>: not an nvidia-smi -q -x report" % root.tag
        )
    header = {
        "timestamp": _text(root, "timestamp"),
        "driver_version": _text(root, "driver_version"),
        "cuda_version": _text(root, "cuda_version"),
        "attached_gpus": _int(root, "attached_gpus"),
    }
    gpus = [_gpu(element, index, header) for index, element in enumerate(root.findall("gpu"))]
    return dict(header, gpus=gpus)


def _finding(device: str, check: str, klass: str, reason: str, remedy: str) -> dict:
    return {"device": device, "check": check, "class": klass, "reason": reason, "remedy": remedy}


def _device(gpu: dict) -> str:
    return "GPU %s (%s)" % (gpu["index"], gpu["pci"] or gpu["uuid"] or "no PCI address")


def _is_idle(gpu: dict) -> bool:
    """Whether the GPU had no work when the report was taken."""
    if "gpu_idle" in gpu["clock_reasons_active"]:
        return True
    return gpu["gpu_util_percent"] == 0 and gpu["performance_state"] not in (None, "P0")


def _gpu_findings(gpu: dict) -> list[dict]:
    found = []
    device = _device(gpu)
    volatile = gpu["ecc"]["volatile"]
    aggregate = gpu["ecc"]["aggregate"]
    if volatile["uncorrectable"]:
        found.append(
            _finding(
                device,
                "ecc_uncorrectable_volatile",
                ISOLATE,
                "%d uncorrectable ECC error(s) since the driver last loaded" % volatile["uncorrectable"],
                "Drain the node; the data the running job read may be corrupt. Check the kernel log "
                "for Xid 48/94/95, reset the GPU, and RMA it if uncorrectable errors come back.",
            )
        )
    elif aggregate["uncorrectable"]:
        # Lifetime count, none since the driver loaded: the memory was repaired (rows
        # remapped, pages retired) or the error is old. Worth watching, not draining.
        found.append(
            _finding(
                device,
                "ecc_uncorrectable_aggregate",
                MONITOR,
                "%d uncorrectable ECC error(s) over the GPU's life, none since the driver loaded"
                % aggregate["uncorrectable"],
                "Watch the volatile count and the remapped rows or retired pages; replace the GPU "
                "if the count keeps growing.",
            )
        )
    remapped = gpu["remapped_rows"]
    if remapped is not None and remapped["failure"]:
        found.append(
            _finding(
                device,
                "row_remap_failure",
                ISOLATE,
                "row remapping failed: the GPU has no spare rows left for a failing memory row",
                "Take the GPU out of service and RMA it (a remapping failure is an RMA criterion).",
            )
        )
    if remapped is not None and remapped["pending"]:
        found.append(
            _finding(
                device,
                "row_remap_pending",
                REBOOT,
                "a memory row is marked for remapping but the remap is not active yet",
                "Reset the GPU (nvidia-smi -r with no process on it) or reboot the node to apply the remap.",
            )
        )
    retired = gpu["retired_pages"]
    if retired is not None and retired["pending"]:
        found.append(
            _finding(
                device,
                "retired_pages_pending",
                REBOOT,
                "a memory page is marked for retirement but still in use until the driver reloads",
                "Reset the GPU or reboot the node so the page is retired.",
            )
        )
    found.extend(_pcie_findings(gpu, device))
    slowdowns = [reason for reason in gpu["clock_reasons_active"] if reason in HARDWARE_SLOWDOWN_REASONS]
    if slowdowns:
        found.append(
            _finding(
                device,
                "clock_hardware_slowdown",
                MONITOR,
                "hardware clock slowdown active: %s" % ", ".join(slowdowns),
                "Check the GPU and inlet temperatures, the fans and the power supplies; a power brake "
                "comes from the baseboard or a PSU. Clocks stay low, and the job slow, while it lasts.",
            )
        )
    return found


def _pcie_findings(gpu: dict, device: str) -> list[dict]:
    """The PCIe link below what it can do.

    Width and generation are judged apart. The width a link trained at does not change
    with load: a narrower link means a bad slot, riser or cable (or a platform built that
    way), so it is always reported. The generation does change: an idle GPU drops its link
    to a lower generation to save power and raises it again under load, so a low generation
    is only reported when the GPU was not idle. Both are ``monitor``: the GPU still works,
    only transfers to and from it are slower.
    """
    pcie = gpu["pcie"]
    found = []
    if pcie["width_current"] is not None and pcie["width_max"] and pcie["width_current"] < pcie["width_max"]:
        found.append(
            _finding(
                device,
                "pcie_link_width",
                MONITOR,
                "PCIe link runs at x%d of x%d" % (pcie["width_current"], pcie["width_max"]),
                "Reseat the GPU or its riser and check the slot; compare with the platform's wiring "
                "(some servers give a GPU fewer lanes by design).",
            )
        )
    if (
        pcie["gen_current"] is not None
        and pcie["gen_max"]
        and pcie["gen_current"] < pcie["gen_max"]
        and not _is_idle(gpu)
    ):
        found.append(
            _finding(
                device,
                "pcie_link_generation",
                MONITOR,
                "PCIe link at generation %d of %d while the GPU was busy"
                % (pcie["gen_current"], pcie["gen_max"]),
                "Check the slot, riser and BIOS PCIe settings; run a bandwidth test (nvbandwidth or "
                "bandwidthTest) to see what the link gives.",
            )
        )
    return found


def findings(report: dict, expected_gpus: int | None = None) -> list[dict]:
    """Findings for a parsed report (parse_nvidia_smi_xml's result), GPU by GPU.

    With ``expected_gpus``, fewer GPUs than expected is an ``isolate`` finding for the node:
    a GPU the driver no longer sees has usually fallen off the bus. The count is the
    driver's ``attached_gpus`` when the report has it, as ``nvidia-smi -q -x -i N`` reports
    one GPU but still counts them all.
    """
    found = []
    gpus = report.get("gpus") or []
    attached = report.get("attached_gpus")
    counted = attached if attached is not None else len(gpus)
    if expected_gpus is not None and counted < expected_gpus:
        found.append(
            _finding(
                "node",
                "gpu_count",
                ISOLATE,
                "the driver sees %d GPU(s), %d expected" % (counted, expected_gpus),
                "Drain the node; look for Xid 79 (fallen off the bus) in the kernel log and for the "
                "missing device in lspci, then reseat or replace the GPU.",
            )
        )
    if attached is not None and attached > len(gpus):
        found.append(
            _finding(
                "node",
                "report_coverage",
                MONITOR,
                "the report describes %d of the %d attached GPU(s); the others were not judged"
                % (len(gpus), attached),
                "Save the report without -i (nvidia-smi -q -x) to judge every GPU.",
            )
        )
    for gpu in gpus:
        found.extend(_gpu_findings(gpu))
    return found

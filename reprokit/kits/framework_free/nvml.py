"""The run's own GPU through NVML (ctypes, no extra package), sampled in a thread.

Framework counters see only their own allocator; NVML sees the device, CUDA
context and cuDNN workspaces included. The memory figure is the peak of
"memory used" minus what was used before this process touched the GPU.

NVML numbers devices its own way and ignores CUDA_VISIBLE_DEVICES, so the
sampler never assumes device 0: it takes every device's baseline before the
framework starts, then watches the one the framework names, by UUID (or PCI
bus id), MIG devices included. A device whose baseline cannot be read (a MIG-mode
GPU's own memory is denied to users) gets none, and a run watched on it says so.
While the run trains it also samples the clock-event ("throttle") reasons, so a
slowdown during the run is seen, not only one before or after it, and the GPU's utilisation
(nvmlDeviceGetUtilizationRates) in its training phases: a GPU the script's model never used shows idle
there. An NVML error marks the sampler unavailable with its reason; it never fails the run.

It is also one of the per-phase memory counters (reprokit/kits/measurement/phases.py): ``reset()`` starts a
phase's peak from the memory used now, ``read()`` gives the highest used since.
"""
from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

LIBRARY = "libnvidia-ml.so.1"
# nvmlClocksEventReasons bits that mean the clocks were held down (nvml.h), in two groups; idle and
# application-clock settings are neither. Slowdowns (heat, hardware) cut the clocks hard, and warn. The
# power brake is one: nvml.h calls it a hardware slowdown (clocks halved or more) asserted by an external
# signal such as the system's power supply, not the driver's routine power management.
SLOWDOWNS = {0x8: "hardware slowdown", 0x20: "software thermal slowdown", 0x40: "hardware thermal slowdown",
             0x80: "hardware power brake"}
# Power management holds the GPU to its power limit: routine under load (H100, H200), so only information.
POWER_MANAGEMENT = {0x4: "software power cap"}
MIG_ENABLE = 1      # NVML_DEVICE_MIG_ENABLE
_TEXT = 96          # NVML_DEVICE_UUID_V2_BUFFER_SIZE, NVML_DEVICE_NAME_V2_BUFFER_SIZE


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class NvmlError(OSError):
    pass


class DeviceSampler:
    """Create before the framework creates its CUDA context; watch() its device; stop() after training."""

    SOURCE = "NVML device memory used, peak minus the idle baseline (CUDA context included)"
    PHASE_SOURCE = ("NVML device memory used, the phase's peak (sampled every 20 ms and at its edges) minus the idle "
                    "baseline (CUDA context included)")

    def __init__(self, interval_s: float = 0.02, library: str = LIBRARY) -> None:
        self.unavailable: str | None = None
        self.uuid: str | None = None
        self.name: str | None = None
        self.found_by: str | None = None
        self.baseline = self.peak = self._phase_peak = 0
        self._lock = threading.Lock()      # the sampling thread and a phase's reset both move the peaks
        self.samples = 0
        self.slowdowns = dict.fromkeys(SLOWDOWNS.values(), 0)
        self.power_management = dict.fromkeys(POWER_MANAGEMENT.values(), 0)
        self.busy_samples: list[int] = []      # utilization.gpu (%) of each sample in a training phase
        self.busy_unread: str | None = None    # why NVML gives no utilisation of the device
        self._phase = ""
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._baselines: dict[str, int] = {}
        self._unread: dict[str, str] = {}      # UUID -> why its baseline could not be read
        self._lib: Any = None                  # the ctypes library, once loaded: its functions by name
        self._initialised = False
        try:
            self._lib = ctypes.CDLL(library)
            self._lib.nvmlErrorString.restype = ctypes.c_char_p
            self._call("nvmlInit_v2")
            self._initialised = True
            count = ctypes.c_uint()
            self._call("nvmlDeviceGetCount_v2", ctypes.byref(count))
            for i in range(count.value):
                self._take_baselines(self._handle("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(i)))
        except (OSError, AttributeError) as exc:
            self.unavailable = f"NVML unavailable ({exc})"

    # -- NVML calls ----------------------------------------------------------

    def _call(self, name: str, *args: Any) -> None:
        code = getattr(self._lib, name)(*args)
        if code != 0:
            raise NvmlError(f"{name}: {self._lib.nvmlErrorString(code).decode()}")

    def _handle(self, name: str, *args: Any) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        self._call(name, *args, ctypes.byref(handle))
        return handle

    def _text(self, name: str, handle: ctypes.c_void_p) -> str:
        buf = ctypes.create_string_buffer(_TEXT)
        self._call(name, handle, buf, ctypes.c_uint(_TEXT))
        return buf.value.decode()

    def _used(self, handle: ctypes.c_void_p) -> int:
        memory = _Memory()
        self._call("nvmlDeviceGetMemoryInfo", handle, ctypes.byref(memory))
        return int(memory.used)

    def _take_baselines(self, gpu: ctypes.c_void_p) -> None:
        """The memory used before the run on a GPU and its MIG devices; for one that cannot be read, why."""
        mig = self._mig_enabled(gpu)
        for handle in (gpu, *self._mig_devices(gpu)):
            try:
                uuid = self._text("nvmlDeviceGetUUID", handle)
            except NvmlError:
                continue                        # without a UUID no run can be matched to it
            if handle is gpu and mig:           # users are denied its memory (NO_PERMISSION); runs use its MIG devices
                self._unread[uuid] = "the GPU is in MIG mode, where runs use its MIG devices"
                continue
            try:
                self._baselines[uuid] = self._used(handle)
            except NvmlError as exc:
                self._unread[uuid] = str(exc)

    def _mig_enabled(self, handle: ctypes.c_void_p) -> bool:
        current, pending = ctypes.c_uint(), ctypes.c_uint()
        try:
            self._call("nvmlDeviceGetMigMode", handle, ctypes.byref(current), ctypes.byref(pending))
        except (NvmlError, AttributeError):     # a GPU without MIG (NOT_SUPPORTED), or a driver before MIG
            return False
        return current.value == MIG_ENABLE

    def _mig_devices(self, handle: ctypes.c_void_p) -> list[Any]:
        count = ctypes.c_uint()
        try:
            self._call("nvmlDeviceGetMaxMigDeviceCount", handle, ctypes.byref(count))
        except (NvmlError, AttributeError):   # not a MIG-capable GPU, or a driver before MIG
            return []
        found = []
        for i in range(count.value):
            try:
                found.append(self._handle("nvmlDeviceGetMigDeviceHandleByIndex", handle, ctypes.c_uint(i)))
            except NvmlError:                  # no MIG device in that slot
                continue
        return found

    def _parent(self, handle: ctypes.c_void_p) -> ctypes.c_void_p:
        """The GPU a MIG device lives on (its clocks are the GPU's), else the handle itself."""
        is_mig = ctypes.c_uint()
        try:
            self._call("nvmlDeviceIsMigDeviceHandle", handle, ctypes.byref(is_mig))
        except (NvmlError, AttributeError):
            return handle
        return self._handle("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", handle) if is_mig.value else handle

    def _reasons(self, handle: ctypes.c_void_p) -> int:
        reasons = ctypes.c_ulonglong()
        # renamed from ...ClocksThrottleReasons in R535; older drivers have only the old name
        name = ("nvmlDeviceGetCurrentClocksEventReasons" if hasattr(self._lib, "nvmlDeviceGetCurrentClocksEventReasons")
                else "nvmlDeviceGetCurrentClocksThrottleReasons")
        self._call(name, handle, ctypes.byref(reasons))
        return reasons.value

    # -- the run -------------------------------------------------------------

    def watch(self, uuid: str | None = None, pci_bus_id: str | None = None, *, mig: bool = False) -> None:
        """Follow the framework's own device, by the UUID it reports or else its PCI bus id.

        CUDA gives a UUID without NVML's "GPU-"/"MIG-" prefix; both are tried. A PCI bus id names
        the whole GPU, so it cannot find a MIG device (``mig``): that is said, not guessed.
        """
        if self.unavailable is not None:
            return
        try:
            if uuid:
                handle = self._by_uuid(uuid)
                self.found_by = "the UUID the framework reported"
            elif pci_bus_id and mig:
                raise NvmlError("the framework runs on a MIG device but reports only its GPU's PCI bus id")
            elif pci_bus_id:
                handle = self._handle("nvmlDeviceGetHandleByPciBusId_v2", pci_bus_id.encode())
                self.found_by = "the PCI bus id the framework reported"
            else:
                raise NvmlError("the framework named no device (neither a UUID nor a PCI bus id)")
            self._device = handle
            self._clocks = self._parent(handle)
            self.uuid = self._text("nvmlDeviceGetUUID", handle)
            self.name = self._text("nvmlDeviceGetName", handle)
            if self.uuid in self._unread:
                self._fail(f"NVML could not read {self.uuid}'s memory before the run ({self._unread[self.uuid]}), "
                           "so the run's device memory is unknown")
                return
            if self.uuid not in self._baselines:
                raise NvmlError(f"{self.uuid} was not among the devices NVML listed before the run")
            self.baseline = self._baselines[self.uuid]
            self.peak = max(self.baseline, self._used(handle))
        except (OSError, AttributeError) as exc:
            self._fail(f"NVML could not find the framework's device ({exc})")
            return
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def watch_first_visible(self, visible: str | None) -> None:
        """Follow the first GPU that CUDA_VISIBLE_DEVICES (``visible``) shows, where no framework names one (its
        model stayed on the CPU): by the UUID given there, else by index where NVML's order is CUDA's (one GPU,
        or CUDA_DEVICE_ORDER=PCI_BUS_ID); otherwise which GPU it is stays unsaid, not guessed."""
        first = (visible if visible is not None else "0").split(",")[0].strip()
        if self.unavailable is not None:
            return
        try:
            uuid = first if first.startswith(("GPU-", "MIG-")) else self._nth(first, visible)
        except (OSError, AttributeError) as exc:
            self._fail(f"NVML could not find the first visible GPU ({exc})")
            return
        self.watch(uuid)
        if self.unavailable is None:
            self.found_by = "the first GPU CUDA_VISIBLE_DEVICES shows (the script's model stayed on the CPU)"

    def listed(self) -> bool:
        """Whether NVML listed any GPU (or MIG device) before the run."""
        return bool(self._baselines or self._unread)

    def _nth(self, index: str, visible: str | None) -> str:
        """The UUID of CUDA's GPU ``index``, where NVML numbers the GPUs as CUDA does."""
        count = ctypes.c_uint()
        self._call("nvmlDeviceGetCount_v2", ctypes.byref(count))
        if not index.isdigit() or int(index) >= count.value:
            raise NvmlError(f"CUDA_VISIBLE_DEVICES={visible!r} shows no GPU NVML lists")
        if count.value > 1 and os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
            raise NvmlError("CUDA numbers GPUs fastest first and NVML by PCI bus: which one CUDA shows first is "
                            "not certain")
        return self._text("nvmlDeviceGetUUID", self._handle("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(int(index))))

    def _by_uuid(self, uuid: str) -> ctypes.c_void_p:
        names = [uuid] if uuid.startswith(("GPU-", "MIG-")) else [f"GPU-{uuid}", f"MIG-{uuid}"]
        for name in names[:-1]:
            try:
                return self._handle("nvmlDeviceGetHandleByUUID", name.encode())
            except NvmlError:
                continue
        return self._handle("nvmlDeviceGetHandleByUUID", names[-1].encode())

    def _sample(self) -> None:
        used = self._used(self._device)
        with self._lock:
            self.peak = max(self.peak, used)
            self._phase_peak = max(self._phase_peak, used)
        active = self._reasons(self._clocks)
        if self._phase == "train" and self.busy_unread is None:
            rates = _Utilization()
            try:        # a MIG device has none (NOT_SUPPORTED): its memory and clocks are still read
                self._call("nvmlDeviceGetUtilizationRates", self._device, ctypes.byref(rates))
                self.busy_samples.append(int(rates.gpu))
            except NvmlError as exc:
                self.busy_unread = str(exc)
        self.samples += 1
        for counts, reasons in ((self.slowdowns, SLOWDOWNS), (self.power_management, POWER_MANAGEMENT)):
            for bit, text in reasons.items():
                counts[text] += bool(active & bit)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._sample()
            except (OSError, AttributeError) as exc:
                self._fail(f"NVML failed during the run ({exc})")
                return

    def reset(self, phase: str = "") -> None:
        """A new phase: its peak starts from the device memory used now."""
        self._phase = phase
        if self._thread is None or self.unavailable is not None:
            return
        try:
            used = self._used(self._device)
        except (OSError, AttributeError) as exc:
            self._fail(f"NVML failed during the run ({exc})")
            return
        with self._lock:
            self._phase_peak = used

    def read(self) -> dict[str, Any]:
        """The device-level peak of the phase that ends now (None with the reason where NVML cannot say)."""
        if self._thread is not None and self.unavailable is None:
            try:
                self._sample()
            except (OSError, AttributeError) as exc:
                self._fail(f"NVML failed during the run ({exc})")
        if self._thread is None or self.unavailable is not None:
            return {"device": {"peak_bytes": None, "source": self.unavailable or "NVML watches no device"}}
        with self._lock:
            peak = self._phase_peak
        return {"device": {"peak_bytes": peak - self.baseline, "source": self.PHASE_SOURCE}}

    def _fail(self, reason: str) -> None:
        self.unavailable = self.unavailable or reason

    def stop(self) -> dict[str, Any]:
        """The device memory figures (None with the reason where NVML could not give them)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            if self.unavailable is None:
                try:
                    self._sample()
                except (OSError, AttributeError) as exc:
                    self._fail(f"NVML failed at the end of the run ({exc})")
        if self._initialised:
            self._initialised = False
            try:
                self._call("nvmlShutdown")
            except (OSError, AttributeError):
                pass
        if self.unavailable is not None:
            return {"device_peak_bytes": None, "device_source": self.unavailable}
        return {"device_peak_bytes": self.peak - self.baseline, "device_baseline_bytes": self.baseline,
                "device_source": self.SOURCE}

    def energy_mj(self) -> int:
        """The watched GPU's energy counter, millijoules since the driver loaded
        (reprokit/kits/measurement/energy.py)."""
        if self._thread is None or self.unavailable is not None:
            raise NvmlError(self.unavailable or "NVML watches no device")
        energy = ctypes.c_ulonglong()
        self._call("nvmlDeviceGetTotalEnergyConsumption", self._device, ctypes.byref(energy))
        return int(energy.value)

    def report(self) -> dict[str, Any]:
        """Which device was watched and how, and the clock-event reasons seen while training, by group."""
        return {"uuid": self.uuid, "name": self.name, "found_by": self.found_by, "unavailable": self.unavailable,
                "clock_events": {"samples": self.samples, "slowdown_samples": dict(self.slowdowns),
                                 "power_samples": dict(self.power_management)},
                "utilization": self.utilization()}

    def utilization(self) -> dict[str, Any]:
        """The GPU's utilisation (NVML's share of time a kernel ran) over the samples taken in training phases."""
        busy = self.busy_samples
        return {"samples": len(busy), "idle_samples": sum(b == 0 for b in busy),
                "mean_percent": round(sum(busy) / len(busy), 1) if busy else None, "unread": self.busy_unread,
                "source": "nvmlDeviceGetUtilizationRates, sampled every 20 ms in the training phases"}

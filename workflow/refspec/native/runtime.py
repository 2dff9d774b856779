"""The patched llama.cpp at run time: models, contexts, layouts, counters, capture.

The Python bindings (``llama_cpp``) are installed from the pinned sdist without
their own native build; they load the patched libraries through
``LLAMA_CPP_LIB_PATH``, which :func:`load` sets before the first import. The
functions the patch adds (``llama_attn_*``) are declared here on the same
library handle.

Every model file is checked before it is loaded: the GGUF structure (magic,
version, tensor extents within the file) and the pinned sha256. Nothing is
computed on a file that fails either check.
"""

from __future__ import annotations

import ctypes
import os
import re
import struct
import sys
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import AdmissionError, DecodeError, IntegrityError, PlacementError, RefspecError
from ..core.fetch import verify_sha256
from ..core.fsutil import atomic_write_text
from ..core.layouts import ROW_LAYOUTS
from ..core.paths import cache_dir
from . import build as native

LAYOUT_CODES = {
    "mq": 0,
    "pq": 1,
    "qb": 2,
    "gs": 3,
    "qh": 4,
}  # the native ABI's code of each layout (refspec.core.layouts)
LAYOUT_NAMES = {v: k for k, v in LAYOUT_CODES.items()}
ROLES = {"target": 0, "draft": 1}
# the scalar fields of llama_attn_counters; graph_* sum, over the micrographs, the size of each
# micrograph's graph: its nodes, the nodes a backend computes, its backend splits
COUNTERS = (
    "callers",
    "micrographs",
    "graph_reuses",
    "graph_rebuilds",
    "rows",
    "graph_nodes",
    "graph_dispatches",
    "graph_splits",
)
PHASES = {"prefill": 0, "continuation": 1}
KV_TYPES = {"f32": 0, "f16": 1, "q8_0": 8, "bf16": 30}

_lib = None
_llama_cpp = None
_lock = threading.Lock()


class AttnCounters(ctypes.Structure):
    _fields_ = [
        ("callers", ctypes.c_int64),
        ("micrographs", ctypes.c_int64),
        ("graph_reuses", ctypes.c_int64),
        ("graph_rebuilds", ctypes.c_int64),
        ("rows", ctypes.c_int64),
        ("layout_micrographs", ctypes.c_int64 * 5),
        ("graph_nodes", ctypes.c_int64),
        ("graph_dispatches", ctypes.c_int64),
        ("graph_splits", ctypes.c_int64),
    ]


class GGMLTensor(ctypes.Structure):
    """The leading fields of ``struct ggml_tensor`` (ggml.h of the pinned source)."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * 4),
        ("nb", ctypes.c_size_t * 4),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * 16),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * 10),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * 64),
        ("extra", ctypes.c_void_p),
        ("padding", ctypes.c_char * 8),
    ]


GGML_TYPE_F32 = 0
GGML_TYPE_F16 = 1


def load(lib_dir: str | Path | None = None):
    """Import the bindings against the patched libraries (once per process)."""
    global _lib, _llama_cpp
    with _lock:
        if _llama_cpp is not None:
            return _llama_cpp
        if lib_dir is None:
            lib_dir = os.environ.get("LLAMA_CPP_LIB_PATH")
        if lib_dir is None:
            lib_dir = native.current().lib_dir
        lib_dir = Path(lib_dir)
        if not (lib_dir / "libllama.so").exists():
            raise RefspecError(f"no libllama.so in {lib_dir}: run `refspec build` first")
        if "llama_cpp" in sys.modules:
            loaded = os.environ.get("LLAMA_CPP_LIB_PATH")
            if loaded and Path(loaded) != lib_dir:
                raise RefspecError(f"llama_cpp already loaded from {loaded}, not {lib_dir}")
        os.environ["LLAMA_CPP_LIB_PATH"] = str(lib_dir)
        import llama_cpp  # noqa: PLC0415  (must follow the environment set-up)

        lib = llama_cpp.llama_cpp._lib
        if not hasattr(lib, "llama_attn_set_layout"):
            raise RefspecError(f"{lib_dir}/libllama.so lacks the refspec patch (llama_attn_set_layout)")
        c = ctypes
        lib.llama_attn_set_layout.argtypes = [c.c_void_p, c.c_int, c.c_int, c.c_uint32]
        lib.llama_attn_set_layout.restype = c.c_int32
        lib.llama_attn_begin_request.argtypes = [c.c_void_p]
        lib.llama_attn_begin_request.restype = None
        lib.llama_attn_set_phase.argtypes = [c.c_void_p, c.c_int]
        lib.llama_attn_set_phase.restype = None
        lib.llama_attn_get_phase.argtypes = [c.c_void_p]
        lib.llama_attn_get_phase.restype = c.c_int
        lib.llama_attn_active_layout.argtypes = [c.c_void_p]
        lib.llama_attn_active_layout.restype = c.c_int
        lib.llama_attn_get_counters.argtypes = [c.c_void_p, c.POINTER(AttnCounters)]
        lib.llama_attn_get_counters.restype = None
        lib.llama_attn_reset_counters.argtypes = [c.c_void_p]
        lib.llama_attn_reset_counters.restype = None
        lib.llama_attn_last_error.argtypes = [c.c_void_p]
        lib.llama_attn_last_error.restype = c.c_char_p

        # tensor reads for capture (works on any backend)
        ggml_base = c.CDLL(str(lib_dir / "libggml-base.so"))
        ggml_base.ggml_backend_tensor_get.argtypes = [c.c_void_p, c.c_void_p, c.c_size_t, c.c_size_t]
        ggml_base.ggml_backend_tensor_get.restype = None
        ggml_base.ggml_nbytes.argtypes = [c.c_void_p]
        ggml_base.ggml_nbytes.restype = c.c_size_t
        lib._ggml_base = ggml_base
        # the backend/device registry (devices actually present: CPU, CUDA0, ...)
        ggml = c.CDLL(str(lib_dir / "libggml.so"))
        ggml.ggml_backend_dev_count.argtypes = []
        ggml.ggml_backend_dev_count.restype = c.c_size_t
        ggml.ggml_backend_dev_get.argtypes = [c.c_size_t]
        ggml.ggml_backend_dev_get.restype = c.c_void_p
        for fn in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
            getattr(ggml, fn).argtypes = [c.c_void_p]
            getattr(ggml, fn).restype = c.c_char_p
        ggml.ggml_backend_dev_memory.argtypes = [c.c_void_p, c.POINTER(c.c_size_t), c.POINTER(c.c_size_t)]
        ggml.ggml_backend_dev_memory.restype = None
        ggml.ggml_backend_dev_type.argtypes = [c.c_void_p]
        ggml.ggml_backend_dev_type.restype = c.c_int
        lib._ggml = ggml

        _install_log_filter(llama_cpp)
        llama_cpp.llama_backend_init()
        _lib = lib
        _llama_cpp = llama_cpp
        return llama_cpp


_LOG_CB = None
_LOG_LINES: list[str] = []
_LOG_CAPTURE: list[list[str]] = []  # open capture windows (model loads): every line, any level


def _install_log_filter(llama_cpp) -> None:
    """Keep llama.cpp's errors (shown and remembered), drop its info chatter."""
    global _LOG_CB
    level_error, level_cont = 4, 5  # GGML_LOG_LEVEL_ERROR, GGML_LOG_LEVEL_CONT
    verbose = os.environ.get("REFSPEC_LLAMA_LOG") == "1"
    last = [0]

    @llama_cpp.llama_log_callback
    def _cb(level, text, _user):
        msg = text.decode("utf-8", "replace") if text else ""
        if level == level_cont:  # a continuation takes the level of the line it continues
            level = last[0]
        last[0] = level
        for window in _LOG_CAPTURE:
            window.append(msg)
        if level == level_error:
            _LOG_LINES.append(msg)
            del _LOG_LINES[:-50]
        if verbose or level == level_error:
            sys.stderr.write(msg)

    _LOG_CB = _cb
    llama_cpp.llama_log_set(_cb, ctypes.c_void_p(0))


def last_log_errors() -> str:
    return "".join(_LOG_LINES[-10:]).strip()


# --------------------------------------------------------------------------- GGUF checks


def check_gguf(path: str | Path, expected_sha256: str | None = None) -> None:
    """Refuse a missing, truncated or corrupt GGUF, or one whose sha256 is not the pinned one."""
    p = Path(path)
    if not p.is_file():
        raise IntegrityError(f"{p}: model file not found")
    size = p.stat().st_size
    with open(p, "rb") as f:
        head = f.read(24)
    if len(head) < 24 or head[:4] != b"GGUF":
        raise IntegrityError(f"{p}: not a GGUF file (bad magic or header)")
    version = struct.unpack_from("<I", head, 4)[0]
    if version not in (2, 3):
        raise IntegrityError(f"{p}: unsupported GGUF version {version}")
    checked = None
    if expected_sha256 is not None:
        # the pin first (0.3 s for 150 MB); the structure walk below (seconds: every metadata
        # array) is done once per content digest: the same bytes have the same structure
        verify_sha256(p, expected_sha256)
        checked = cache_dir() / "gguf-checked" / str(expected_sha256).lower()
        if checked.is_file():
            return
    try:
        from gguf import GGUFReader

        reader = GGUFReader(str(p))
        end = 0
        for t in reader.tensors:
            end = max(end, int(t.data_offset) + int(t.n_bytes))
    except Exception as e:  # the reader raises on structures that run past the end
        raise IntegrityError(f"{p}: corrupt or truncated GGUF ({type(e).__name__}: {e})") from e
    if end > size:
        raise IntegrityError(f"{p}: truncated GGUF: tensor data ends at byte {end}, file has {size}")
    if checked is not None:
        checked.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(checked, f"GGUF structure checked: {size} bytes, tensor data ends at {end}\n")


# --------------------------------------------------------------------------- placement

DEVICE_TYPES = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}
_LAYER_RE = re.compile(r"layer\s+(\d+) assigned to device (\S+?),")
_OFFLOADED_RE = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_BUFFER_RE = re.compile(r"^\S*:?\s*(\S+) model buffer size =\s*([0-9.]+) MiB", re.M)


def devices() -> list[dict]:
    """The backend devices ggml registered in this process (``ggml_backend_dev_*``), with their memory."""
    load()
    g = _lib._ggml
    out = []
    for i in range(int(g.ggml_backend_dev_count())):
        dev = g.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        g.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        out.append(
            {
                "name": (g.ggml_backend_dev_name(dev) or b"").decode("utf-8", "replace"),
                "description": (g.ggml_backend_dev_description(dev) or b"").decode("utf-8", "replace"),
                "type": DEVICE_TYPES.get(int(g.ggml_backend_dev_type(dev)), "unknown"),
                "memory_total_mib": round(total.value / 2**20, 1),
                "memory_free_mib": round(free.value / 2**20, 1),
            }
        )
    return out


def accelerators(devs: list[dict] | None = None) -> list[dict]:
    """The devices that layers can be offloaded to (dedicated or integrated GPUs)."""
    return [d for d in (devices() if devs is None else devs) if d["type"] in ("gpu", "igpu")]


def placement_from_log(text: str, *, requested: int, n_layer: int) -> dict:
    """Where a model's weights actually went, from llama.cpp's own load log.

    ``layers``: the device each of the ``n_layer + 1`` offloadable layers (the repeating
    layers and the output layer) was assigned to (llama.cpp's per-layer debug lines);
    ``offloaded``: how many of them are not on the CPU; ``buffers``: the weight buffers
    llama.cpp allocated, name -> MiB (``CUDA0``, ``CPU_Mapped``, ...). The devices are
    those ggml registered (:func:`devices`), so a library built without a GPU backend,
    or a GPU hidden by ``CUDA_VISIBLE_DEVICES``, reports 0 offloaded layers, whatever
    was asked.
    """
    layers: dict[int, str] = {}
    for m in _LAYER_RE.finditer(text):
        layers[int(m.group(1))] = m.group(2)
    if layers:
        offloaded = sum(1 for d in layers.values() if not d.upper().startswith("CPU"))
    else:  # no debug lines: llama.cpp's summary line (printed only when a GPU backend exists)
        m = _OFFLOADED_RE.search(text)
        offloaded = int(m.group(1)) if m else 0
    buffers = {m.group(1): float(m.group(2)) for m in _BUFFER_RE.finditer(text)}
    devs = devices()
    used = sorted({d for d in layers.values() if not d.upper().startswith("CPU")})
    gpu_mib = sum(v for k, v in buffers.items() if not k.upper().startswith("CPU"))
    if offloaded and gpu_mib <= 0:  # layers said to be on a device that holds no weights: not offloaded
        offloaded = 0
    on = [d for d in devs if d["name"] in used] or accelerators(devs)[:1]
    device = on[0] if offloaded and on else next((d for d in devs if d["type"] == "cpu"), {"name": "CPU"})
    return {
        "requested": requested,
        "offloadable": n_layer + 1,
        "expected": expected_offload(requested, n_layer),
        "offloaded": offloaded,
        "device": device.get("name", "CPU") if offloaded else "CPU",
        "device_description": device.get("description", "")
        if offloaded
        else next((d["description"] for d in devs if d["type"] == "cpu"), ""),
        "device_memory_total_mib": device.get("memory_total_mib") if offloaded else None,
        "buffers_mib": buffers,
        "devices": devs,
    }


def placement_shortfall(placement: dict) -> str | None:
    """Why a model's placement falls short of what was asked (None when it does not): fewer
    layers on a device than ``expected``. The one rule for workers (the driver refuses to time
    them) and for the commands that decode in their own process (:class:`Model` with
    ``require_placement``)."""
    expected = int(placement.get("expected", 0))
    if int(placement.get("offloaded", 0)) >= expected:
        return None
    present = [d["name"] for d in placement.get("devices", []) if d.get("type") in ("gpu", "igpu")]
    return (
        f"{placement.get('offloaded')} of {expected} layers asked for are on a device "
        f"(devices present: {', '.join(present) or 'no GPU'})"
    )


def expected_offload(requested: int, n_layer: int) -> int:
    """Layers llama.cpp offloads for ``n_gpu_layers = requested`` when a GPU is present."""
    return n_layer + 1 if requested < 0 else min(int(requested), n_layer + 1)


# --------------------------------------------------------------------------- models


class Model:
    """A loaded GGUF model (weights on the CPU unless ``n_gpu_layers`` says otherwise)."""

    def __init__(
        self,
        path: str | Path,
        *,
        sha256: str | None = None,
        n_gpu_layers: int = 0,
        lib_dir: str | Path | None = None,
        require_placement: bool = False,
    ):
        llama_cpp = load(lib_dir)
        self.path = Path(path)
        check_gguf(self.path, sha256)
        mp = llama_cpp.llama_model_default_params()
        mp.n_gpu_layers = int(n_gpu_layers)  # negative: every layer (llama.cpp's convention)
        mp.use_mmap = True
        window: list[str] = []
        _LOG_CAPTURE.append(window)
        try:
            self._ptr = llama_cpp.llama_model_load_from_file(str(self.path).encode(), mp)
        finally:
            _LOG_CAPTURE.remove(window)
        if not self._ptr:
            raise IntegrityError(f"{self.path}: llama.cpp could not load the model: {last_log_errors()}")
        self.vocab = llama_cpp.llama_model_get_vocab(self._ptr)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.n_layer = llama_cpp.llama_model_n_layer(self._ptr)
        self.n_ctx_train = llama_cpp.llama_model_n_ctx_train(self._ptr)
        self._l = llama_cpp
        self.placement = placement_from_log("".join(window), requested=int(n_gpu_layers), n_layer=self.n_layer)
        short = placement_shortfall(self.placement) if require_placement else None
        if short:
            self.close()
            raise PlacementError(f"{self.path.name}: {short}; refusing to run it on the CPU in its place")

    def close(self) -> None:
        if getattr(self, "_ptr", None):
            self._l.llama_model_free(self._ptr)
            self._ptr = None

    def __del__(self):  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass

    def is_eog(self, token: int) -> bool:
        return bool(self._l.llama_vocab_is_eog(self.vocab, int(token)))

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        n_max = len(data) + 16
        buf = (ctypes.c_int32 * n_max)()
        n = self._l.llama_tokenize(self.vocab, data, len(data), buf, n_max, add_special, parse_special)
        if n < 0:
            n_max = -n
            buf = (ctypes.c_int32 * n_max)()
            n = self._l.llama_tokenize(self.vocab, data, len(data), buf, n_max, add_special, parse_special)
        if n < 0:
            raise DecodeError("tokenization failed")
        return list(buf[:n])

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str:
        if not tokens:
            return ""
        arr = (ctypes.c_int32 * len(tokens))(*tokens)
        cap = 8 * len(tokens) + 64
        buf = ctypes.create_string_buffer(cap)
        n = self._l.llama_detokenize(self.vocab, arr, len(tokens), buf, cap, False, special)
        if n < 0:
            cap = -n + 1
            buf = ctypes.create_string_buffer(cap)
            n = self._l.llama_detokenize(self.vocab, arr, len(tokens), buf, cap, False, special)
        return buf.raw[:n].decode("utf-8", "replace")

    def chat_prompt(self, user_text: str, system: str | None = None) -> str:
        """Apply the model's own chat template to one user turn, with the assistant turn opened."""
        tmpl = self._l.llama_model_chat_template(self._ptr, None)
        msgs = []
        if system:
            msgs.append(("system", system))
        msgs.append(("user", user_text))
        keep = [(r.encode(), t.encode("utf-8")) for r, t in msgs]
        arr = (self._l.llama_chat_message * len(keep))()
        for i, (r, t) in enumerate(keep):
            arr[i].role = r
            arr[i].content = t
        cap = sum(len(t) for _, t in keep) * 2 + 512
        buf = ctypes.create_string_buffer(cap)
        n = self._l.llama_chat_apply_template(tmpl, arr, len(keep), True, buf, cap)
        if n > cap:
            buf = ctypes.create_string_buffer(n + 1)
            n = self._l.llama_chat_apply_template(tmpl, arr, len(keep), True, buf, n + 1)
        if n < 0:
            raise DecodeError(f"{self.path.name}: the chat template could not be applied")
        return buf.raw[:n].decode("utf-8")


# --------------------------------------------------------------------------- capture


@dataclass
class Captured:
    name: str
    layer: int
    type: int
    ne: tuple[int, int, int, int]
    nb: tuple[int, int, int, int]
    data: np.ndarray  # raw element buffer (float32 or float16), as stored


class Capture:
    """An eval callback that copies chosen graph nodes (by base name and layer).

    ``names`` are node base names such as ``kq``, ``kq_soft_max``, ``kqv``; the PQ
    layout's per-query nodes (``kq_pq0`` ...) are matched by prefix. Each
    micrograph's nodes are appended to :attr:`items` in execution order.
    """

    def __init__(self, names: Iterable[str], layers: Iterable[int]):
        self.names = tuple(names)
        self.layers = set(int(x) for x in layers)
        self.items: list[Captured] = []
        self.errors: list[str] = []  # exceptions of the callback (none may cross the C boundary)
        self.enabled = True
        llama_cpp = load()
        self._ggml = llama_cpp.llama_cpp._lib._ggml_base

        def _cb(t, ask, _user):
            try:
                return self._on_node(t, ask)
            except Exception as e:  # kept in errors, which the capture's user reports
                self.errors.append(f"{type(e).__name__}: {e}")
                return True

        self.c_callback = llama_cpp.ggml_backend_sched_eval_callback(_cb)

    def _match(self, name: str) -> tuple[str, int] | None:
        base, _, layer = name.rpartition("-")
        if not base or not layer.lstrip("-").isdigit():
            return None
        il = int(layer)
        if il not in self.layers:
            return None
        for n in self.names:
            if base == n or (base.startswith(n + "_pq") and base[len(n) + 3 :].isdigit()):
                return base, il
        return None

    def _on_node(self, tptr, ask: bool) -> bool:
        if not self.enabled:
            return not ask
        t = GGMLTensor.from_address(tptr)
        name = t.name.decode("utf-8", "replace")
        m = self._match(name)
        if ask:
            return m is not None
        if m is None:
            return True
        if t.type not in (GGML_TYPE_F32, GGML_TYPE_F16):
            return True
        nbytes = self._ggml.ggml_nbytes(tptr)
        dtype = np.float32 if t.type == GGML_TYPE_F32 else np.float16
        buf = np.empty(nbytes // np.dtype(dtype).itemsize, dtype=dtype)
        self._ggml.ggml_backend_tensor_get(tptr, buf.ctypes.data, 0, nbytes)
        self.items.append(Captured(m[0], m[1], t.type, tuple(t.ne), tuple(t.nb), buf))
        return True

    def clear(self) -> None:
        self.items.clear()


# --------------------------------------------------------------------------- contexts


@dataclass(frozen=True)
class ContextSpec:
    n_ctx: int = 2048
    n_batch: int = 512
    n_ubatch: int = 512
    threads: int = 2
    kv_type: str = "f16"
    n_seq_max: int = 1
    flash_attn: bool = False
    layout: str = "mq"
    role: str = "target"
    mask: int = 0


class Context:
    """One llama.cpp context with its layout, role and phase mask set per context."""

    def __init__(self, model: Model, spec: ContextSpec = ContextSpec(), capture: Capture | None = None):
        llama_cpp = load()
        self._l = llama_cpp
        self._lib = llama_cpp.llama_cpp._lib
        self.model = model
        self.spec = spec
        if spec.kv_type not in KV_TYPES:
            raise AdmissionError(f"unknown KV type {spec.kv_type!r}")
        cp = llama_cpp.llama_context_default_params()
        cp.n_ctx = spec.n_ctx
        cp.n_batch = spec.n_batch
        cp.n_ubatch = spec.n_ubatch
        cp.n_seq_max = spec.n_seq_max
        cp.n_threads = spec.threads
        cp.n_threads_batch = spec.threads
        cp.flash_attn_type = 1 if spec.flash_attn else 0  # LLAMA_FLASH_ATTN_TYPE_ENABLED / DISABLED
        cp.type_k = KV_TYPES[spec.kv_type]
        cp.type_v = KV_TYPES[spec.kv_type]
        cp.no_perf = True
        self.capture = capture
        if capture is not None:
            cp.cb_eval = capture.c_callback
            cp.cb_eval_user_data = None
        self._ptr = llama_cpp.llama_init_from_model(model._ptr, cp)
        if not self._ptr:
            raise AdmissionError(f"llama.cpp could not create the context: {last_log_errors()}")
        self.mem = llama_cpp.llama_get_memory(self._ptr)
        self.n_vocab = model.n_vocab
        self._batch = llama_cpp.llama_batch_init(max(spec.n_batch, 1), 0, 1)
        rc = self._lib.llama_attn_set_layout(self._ptr, LAYOUT_CODES[spec.layout], ROLES[spec.role], int(spec.mask))
        if rc != 0:
            msg = self._lib.llama_attn_last_error(self._ptr).decode()
            self.close()
            raise AdmissionError(f"layout {spec.layout} refused for {model.path.name}: {msg}")

    def close(self) -> None:
        if getattr(self, "_ptr", None):
            self._l.llama_batch_free(self._batch)
            self._l.llama_free(self._ptr)
            self._ptr = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):  # pragma: no cover
        try:
            self.close()
        except Exception:
            pass

    # phase guard ---------------------------------------------------------------------
    def begin_request(self) -> None:
        """Clear the KV cache and reset the phase to prefill."""
        self._l.llama_memory_clear(self.mem, True)
        self._lib.llama_attn_begin_request(self._ptr)

    def set_phase(self, phase: str) -> None:
        self._lib.llama_attn_set_phase(self._ptr, PHASES[phase])

    def phase(self) -> str:
        return {v: k for k, v in PHASES.items()}[self._lib.llama_attn_get_phase(self._ptr)]

    def active_layout(self) -> str:
        return LAYOUT_NAMES[self._lib.llama_attn_active_layout(self._ptr)]

    def set_layout(self, layout: str, role: str | None = None, mask: int | None = None) -> None:
        role = role or self.spec.role
        mask = self.spec.mask if mask is None else mask
        rc = self._lib.llama_attn_set_layout(self._ptr, LAYOUT_CODES[layout], ROLES[role], int(mask))
        if rc != 0:
            raise AdmissionError(self._lib.llama_attn_last_error(self._ptr).decode())

    # counters ------------------------------------------------------------------------
    def counters(self) -> dict[str, int]:
        c = AttnCounters()
        self._lib.llama_attn_get_counters(self._ptr, ctypes.byref(c))
        out = {k: int(getattr(c, k)) for k in COUNTERS}
        for name, idx in LAYOUT_CODES.items():
            out[f"micrographs_{name}"] = int(c.layout_micrographs[idx])
        return out

    def reset_counters(self) -> None:
        self._lib.llama_attn_reset_counters(self._ptr)

    # KV ------------------------------------------------------------------------------
    def pos_max(self) -> int:
        return int(self._l.llama_memory_seq_pos_max(self.mem, 0))

    def seq_rm(self, p0: int) -> None:
        if not self._l.llama_memory_seq_rm(self.mem, 0, int(p0), -1):
            raise DecodeError(f"could not remove KV positions >= {p0}")

    # decode --------------------------------------------------------------------------
    def decode(self, tokens: Sequence[int], pos0: int, outputs: str | Sequence[int] = "last") -> np.ndarray:
        """One ``llama_decode`` call (one *caller*); returns the requested logits rows.

        ``outputs``: ``"last"``, ``"all"`` or the row indices whose logits are needed.
        """
        n = len(tokens)
        if n == 0:
            raise DecodeError("empty batch")
        if n > self.spec.n_batch:
            raise DecodeError(f"batch of {n} tokens exceeds n_batch {self.spec.n_batch}")
        if pos0 + n > self.spec.n_ctx:
            raise DecodeError(f"context full: {pos0 + n} positions > n_ctx {self.spec.n_ctx}")
        if outputs == "last":
            want = [n - 1]
        elif outputs == "all":
            want = list(range(n))
        else:
            want = sorted(int(i) for i in outputs)
        wantset = set(want)
        b = self._batch
        for i, tok in enumerate(tokens):
            b.token[i] = int(tok)
            b.pos[i] = pos0 + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = 1 if i in wantset else 0
        b.n_tokens = n
        rc = self._l.llama_decode(self._ptr, b)
        if rc != 0:
            err = self._lib.llama_attn_last_error(self._ptr).decode()
            if err and rc == -3:  # the layout refused at graph build (admission), e.g. a node the device lacks
                raise AdmissionError(f"llama_decode returned {rc}: {err}")
            raise DecodeError(f"llama_decode returned {rc}" + (f": {err}" if err else f": {last_log_errors()}"))
        out = np.empty((len(want), self.n_vocab), dtype=np.float32)
        for j, i in enumerate(want):
            ptr = self._l.llama_get_logits_ith(self._ptr, i)
            out[j] = np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))
        return out


ROLE_BITS = {"target": (1, 2), "draft": (4, 8)}  # (prefill, continuation) bits of the phase mask


def layout_refusal(model: Model, spec: ContextSpec, tokens: Sequence[int] | None = None) -> str | None:
    """The device's refusal of ``spec``'s layout, observed on a scratch context (None when it runs).

    The patched library refuses a graph whose layout nodes the model's device does not support
    (rather than let the scheduler run them on another backend); that happens at the first
    decode with the layout active, so a context creation alone does not show it. This probe
    decodes one full micro-batch (``tokens``, default ``n_ubatch`` copies of token 0, at most 4,
    the layouts' limit) with the layout active in the first phase the mask activates for the
    role, in a context of its own that is freed afterwards. Only layouts with their own graph
    (``ROW_LAYOUTS``) on a model with layers on a device can be refused this way."""
    if spec.layout not in ROW_LAYOUTS or not model.placement.get("offloaded"):
        return None
    prefill_bit, cont_bit = ROLE_BITS[spec.role]
    if not spec.mask & (prefill_bit | cont_bit):
        return None
    probe = list(tokens) if tokens is not None else [0] * max(1, min(int(spec.n_ubatch), 4))
    with Context(model, spec) as c:
        c.begin_request()
        if not spec.mask & prefill_bit:
            c.set_phase("continuation")
        try:
            c.decode(probe, 0)
        except AdmissionError as e:
            return str(e)
    return None


def greedy(logits_row: np.ndarray) -> int:
    """The greedy token: the first index of the maximum (llama.cpp's greedy sampler rule)."""
    return int(np.argmax(logits_row))


def top2_margin(logits_row: np.ndarray) -> float:
    """Difference between the largest and second-largest logit."""
    part = np.partition(logits_row, -2)[-2:]
    return float(part[1] - part[0])

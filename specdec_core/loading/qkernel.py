"""The quantised product kernel (kernels/qmatmul.c): compiled once per machine into the cache, called with ctypes.

The C file is small and has no dependency but a C compiler and POSIX threads; it is built with the machine's own
instruction set (`-march=native`), so the library is kept per source, compiler and CPU. Without a compiler, or where
the build or its self-check fails, `library()` returns None with the reason in `unavailable_reason()`, and the loader
runs the model's weights as floats instead, saying so.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

SOURCE = Path(__file__).with_name("kernels") / "qmatmul.c"
_DISABLE = "SPECDEC_QUANT_KERNEL"  # "off": never build or use the kernel; "avx2": build it without AVX-512
_FLAG_SETS = (["-march=native"], ["-mcpu=native"], [])
_reason: list[str] = []


def _flag_sets() -> tuple[list[str], ...]:
    """The compiler flags to try in turn; `SPECDEC_QUANT_KERNEL=avx2` leaves AVX-512 out (to compare the two paths on
    one machine, or where AVX-512 slows the clock)."""
    if os.environ.get(_DISABLE, "").lower() == "avx2" and platform.machine() in ("x86_64", "AMD64"):
        return tuple(flags + ["-mno-avx512f"] for flags in _FLAG_SETS[:1]) + _FLAG_SETS[2:]
    return _FLAG_SETS


@functools.cache
def _cpus() -> int:
    from specdec_core.defaults import available_cpus

    return available_cpus()


def threads() -> int:
    """Threads for one product: the count the user chose ($SPECDEC_THREADS, or `--threads`, which sets it), which
    PyTorch also runs; else PyTorch's count, except on a machine with 2 logical CPUs, where PyTorch keeps one
    (commands/threads.py) and the products use both. PyTorch's spinning threads can slow a pass many times when another
    program takes a core; the kernel's pool runs a product on the caller alone whenever a worker lagged behind it
    (the C file's g_alone), so a busy core costs it about what one thread would."""
    torch_threads = max(1, torch.get_num_threads())
    chosen = os.environ.get("SPECDEC_THREADS", "").strip()
    if chosen.isdigit() and int(chosen) > 0:
        return torch_threads
    return 2 if _cpus() == 2 else torch_threads


def unavailable_reason() -> str:
    return _reason[-1] if _reason else ""


def build_id() -> str:
    """Which build of the kernel this process runs (its source, compiler, flags and CPU, as its file name says), or ""
    without one: what a quantised model's speed was measured with (cost_memory keys its figures by it)."""
    lib = library()
    return "" if lib is None else Path(lib._name).stem.removeprefix("qmatmul-")


@functools.cache
def library(cache_dir: Path | None = None) -> ctypes.CDLL | None:
    """The compiled kernel, built into `<cache>/kernels/` on first use; None (and a reason) when it cannot be had."""
    refused = refusal()
    if refused:
        _reason.append(refused)
        return None
    compiler = _compiler()
    folder = _kernel_folder(cache_dir)
    target = folder / f"qmatmul-{_build_key(compiler)}{'.dylib' if platform.system() == 'Darwin' else '.so'}"
    if not target.is_file():
        with _one_build_at_a_time(target):
            error = "" if target.is_file() else _build(compiler, target)  # built by another process meanwhile?
        if error:
            _reason.append(error)
            return None
    try:
        lib = ctypes.CDLL(str(target))
    except OSError as error:
        _reason.append(f"the quantised kernel {target} does not load: {error}")
        return None
    _declare(lib)
    if not _self_check(lib):
        _reason.append("the quantised kernel built here computes wrong products (self-check failed)")
        return None
    return lib


def refusal() -> str:
    """Why the kernel cannot be had, where that is known without building it (turned off, no compiler); "" else."""
    if os.environ.get(_DISABLE, "").lower() == "off":
        return f"{_DISABLE}=off"
    if _compiler() is None:
        return "no C compiler (cc, gcc or clang) was found to build the quantised kernel"
    return ""


def _compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


@contextlib.contextmanager
def built_beside() -> Iterator[None]:
    """Build (or load) the kernel on a thread of its own while the body runs; the body's end waits for it. The
    compiler is a process of its own, so on a machine without the kernel yet its seconds overlap the body's work.
    A body that fails still waits for the build: a thread left building would hold the build's lock file open in a
    decoding process the app forks later (app/host.py). What the build raises is raised again by the caller's own
    `library()` call, not here."""

    def build() -> None:
        with contextlib.suppress(Exception):
            library()

    building = threading.Thread(target=build, name="specdec-kernel-build", daemon=True)
    building.start()
    try:
        yield
    finally:
        building.join()


def _kernel_folder(cache_dir: Path | None) -> Path:
    if cache_dir is None:
        from specdec_core.loading.resources import default_cache_dir

        cache_dir = default_cache_dir()
    return Path(cache_dir) / "kernels"


def _build_key(compiler: str) -> str:
    digest = hashlib.sha256(SOURCE.read_bytes())
    digest.update(compiler.encode())
    digest.update(repr(_flag_sets()).encode())
    digest.update(platform.machine().encode())
    digest.update(_cpu_flags().encode())
    return digest.hexdigest()[:16]


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor()


@contextlib.contextmanager
def _one_build_at_a_time(target: Path) -> Iterator[None]:
    """Across processes: the first to need the kernel builds it, the others wait for its file (on a fresh machine
    the app and the CLI, or the test processes, start together; each compiling costs a core seconds). Unlocked
    where there is no fcntl or the folder cannot be written (the build then says why)."""
    try:
        import fcntl

        target.parent.mkdir(parents=True, exist_ok=True)
        lock = open(target.with_name(".build.lock"), "a")  # noqa: SIM115 - held until the build is done
    except (ImportError, OSError):
        lock = None
    if lock is None:
        yield
        return
    with lock:
        with contextlib.suppress(OSError):
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _build(compiler: str, target: Path) -> str:
    """Compile into `target` (atomically: a temporary name, then a rename); "" or why it failed."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return f"cannot write the quantised kernel into {target.parent}: {error.strerror or error}"
    last = ""
    for flags in _flag_sets():
        handle, partial = tempfile.mkstemp(prefix=".build-", suffix=target.suffix, dir=target.parent)
        os.close(handle)
        command = [compiler, "-O3", *flags, "-shared", "-fPIC", "-pthread", "-o", partial, str(SOURCE)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=120)
            if done.returncode == 0:
                os.replace(partial, target)
                return ""
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        except (OSError, subprocess.TimeoutExpired) as error:
            last = str(error)
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
    return f"the quantised kernel did not compile ({last})"


def _declare(lib: ctypes.CDLL) -> None:
    pointer, integer = ctypes.c_void_p, ctypes.c_int
    lib.specdec_qmatmul.argtypes = [integer, pointer, pointer, pointer, integer, integer, integer, integer, pointer,
                                    integer, pointer, pointer, integer, integer]
    lib.specdec_qmatmul.restype = integer
    lib.specdec_has_avx2.restype = lib.specdec_has_avx512.restype = integer
    single, long = ctypes.c_float, ctypes.c_long
    lib.specdec_rmsnorm.argtypes = [pointer, pointer, single, integer, integer, pointer]
    lib.specdec_rope.argtypes = [pointer, long, integer, integer, integer, pointer, pointer]
    lib.specdec_attend.argtypes = [pointer, long, integer, integer, integer, pointer, pointer, long, long, integer,
                                   integer, pointer, single, pointer, pointer]
    lib.specdec_decode.argtypes = [integer, pointer, integer, integer, pointer, pointer, pointer, pointer, integer]
    lib.specdec_decode.restype = integer
    lib.specdec_layout.restype = integer
    lib.specdec_relayout.argtypes = [integer, integer, pointer, pointer, integer, integer, integer]
    lib.specdec_relayout.restype = integer
    lib.specdec_silu_mul.argtypes = [pointer, integer, integer, pointer]
    lib.specdec_narrow.argtypes = [integer, integer, integer, pointer, pointer, pointer, integer, integer, pointer,
                                   pointer, pointer]
    lib.specdec_narrow.restype = integer
    for name in ("specdec_rmsnorm", "specdec_rope", "specdec_attend", "specdec_silu_mul"):
        getattr(lib, name).restype = None
    layer = ctypes.POINTER(Layer)
    lib.specdec_layer_qkv.argtypes = [layer, pointer, integer, pointer, pointer, pointer, pointer, pointer, integer,
                                      integer]
    lib.specdec_layer_rest.argtypes = [layer, pointer, pointer, integer, pointer, pointer, pointer, long, long,
                                       integer, pointer, pointer, pointer, integer, integer]
    lib.specdec_layer_step.argtypes = [layer, pointer, pointer, integer, pointer, pointer, pointer, pointer, long, long,
                                       integer, pointer, pointer, pointer, integer, integer]
    lib.specdec_layer_qkv.restype = lib.specdec_layer_rest.restype = lib.specdec_layer_step.restype = integer
    lib.specdec_stack_step.argtypes = [pointer, integer, pointer, pointer, integer, pointer, pointer, pointer, pointer,
                                       pointer, pointer, integer, pointer, pointer, pointer, integer, integer]
    lib.specdec_stack_step.restype = integer


class QWeight(ctypes.Structure):
    """A quantised weight as the C file's layer functions take it (qweight_t): kind, output rows, input columns,
    group; its tables' form (0: a float per group, 1: a K-quant's own, 2: a half-precision float per group); the data,
    scale and offset tables' addresses; a float32 bias's address or None."""

    _fields_ = [("kind", ctypes.c_int), ("n", ctypes.c_int), ("k", ctypes.c_int), ("g", ctypes.c_int),
                ("tables", ctypes.c_int), ("w", ctypes.c_void_p), ("wd", ctypes.c_void_p), ("wm", ctypes.c_void_p),
                ("bias", ctypes.c_void_p)]


class Layer(ctypes.Structure):
    """A decoder layer as the C file's layer functions take it (layer_t)."""

    _fields_ = [("width", ctypes.c_int), ("heads", ctypes.c_int), ("kv_heads", ctypes.c_int), ("dim", ctypes.c_int),
                ("inter", ctypes.c_int), ("eps", ctypes.c_float), ("qk_eps", ctypes.c_float),
                ("scale", ctypes.c_float), ("in_norm", ctypes.c_void_p), ("post_norm", ctypes.c_void_p),
                ("q_norm", ctypes.c_void_p), ("k_norm", ctypes.c_void_p), ("qkv", QWeight), ("o", QWeight),
                ("gate_up", QWeight), ("down", QWeight)]


def silu_mul(lib: ctypes.CDLL, gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up for rows [rows, 2 * inter] of gate then up (float32 contiguous): [rows, inter]."""
    rows, inter = gate_up.shape[0], gate_up.shape[1] // 2
    out = torch.empty(rows, inter)
    lib.specdec_silu_mul(gate_up.data_ptr(), rows, inter, out.data_ptr())
    return out


def layer_qkv(lib: ctypes.CDLL, layer: Layer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, threads: int,
              fine: bool) -> torch.Tensor:
    """A layer's query, key and value rows [rows, (heads + 2 kv_heads) * dim] of x [rows, width] float32 contiguous,
    normed per head where the layer says so and rotated by cos, sin [rows, dim] (specdec_layer_qkv)."""
    rows = x.shape[0]
    qkv = torch.empty(rows, layer.qkv.n)
    work, scratch = _work(4 * rows * layer.width), _scratch(layer_scratch_bytes(layer, rows))
    status = lib.specdec_layer_qkv(ctypes.byref(layer), x.data_ptr(), rows, cos.data_ptr(), sin.data_ptr(),
                                   qkv.data_ptr(), work.data_ptr(), scratch.data_ptr(), threads, fine)
    if status != 0:
        raise ValueError("the quantised kernel cannot take this layer's weights")
    return qkv


def layer_rest(lib: ctypes.CDLL, layer: Layer, x: torch.Tensor, qkv: torch.Tensor, key: torch.Tensor,
               value: torch.Tensor, visible: torch.Tensor | None, threads: int, fine: bool) -> torch.Tensor:
    """x plus the layer's attention of qkv's queries over key, value [kv_heads, keys, dim] (same strides, rows of
    dim contiguous), plus its MLP on that sum (specdec_layer_rest): the layer's output [rows, width]."""
    rows, keys = x.shape[0], key.shape[1]
    out = torch.empty_like(x)
    floats = rows * (3 * layer.width + layer.heads * layer.dim + 3 * layer.inter) + 5 * keys
    status = lib.specdec_layer_rest(ctypes.byref(layer), x.data_ptr(), out.data_ptr(), rows, qkv.data_ptr(),
                                    key.data_ptr(), value.data_ptr(), key.stride(0), key.stride(1), keys,
                                    None if visible is None else visible.data_ptr(), _work(4 * floats).data_ptr(),
                                    _scratch(layer_scratch_bytes(layer, rows)).data_ptr(), threads, fine)
    if status != 0:
        raise ValueError("the quantised kernel cannot take this layer's weights")
    return out


def layer_step(lib: ctypes.CDLL, layer: Layer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, key: torch.Tensor,
               value: torch.Tensor, start: int, visible: torch.Tensor | None, threads: int, fine: bool) -> torch.Tensor:
    """layer_qkv, the new keys and values stored into the cache's buffers key, value [kv_heads, capacity, dim] (same
    strides, rows of dim contiguous) at positions start .. start + rows - 1, then layer_rest over every key up to
    them, in one call (specdec_layer_step): the layer's output [rows, width]."""
    rows = x.shape[0]
    out = torch.empty_like(x)
    floats = rows * (layer.qkv.n + 3 * layer.width + layer.heads * layer.dim + 3 * layer.inter) + 5 * (start + rows)
    seen = None if visible is None else visible.data_ptr()
    status = lib.specdec_layer_step(ctypes.byref(layer), x.data_ptr(), out.data_ptr(), rows, cos.data_ptr(),
                                    sin.data_ptr(), key.data_ptr(), value.data_ptr(), key.stride(0), key.stride(1),
                                    start, seen, _work(4 * floats).data_ptr(),
                                    _scratch(layer_scratch_bytes(layer, rows)).data_ptr(), threads, fine)
    if status != 0:
        raise ValueError("the quantised kernel cannot take this layer's weights")
    return out


class Stack:
    """Decoder layers as one call of the C file's specdec_stack_step takes them: the layers' addresses, and per step
    the addresses and strides of each layer's key and value buffers."""

    def __init__(self, layers: list[Layer]):
        self.layers = layers
        self.count = len(layers)
        self.addresses = (ctypes.c_void_p * self.count)(*(ctypes.addressof(layer) for layer in layers))
        self.keys, self.values = (ctypes.c_void_p * self.count)(), (ctypes.c_void_p * self.count)()
        self.head_strides, self.pos_strides = (ctypes.c_long * self.count)(), (ctypes.c_long * self.count)()
        self.width = layers[0].width
        self.widest = max(layer_scratch_bytes(layer, 1) for layer in layers)
        self.per_row = max(layer.qkv.n + 3 * layer.width + layer.heads * layer.dim + 3 * layer.inter
                           for layer in layers)  # the widest layer's floats of work a row (specdec_layer_step)

    def work_floats(self, rows: int, keys: int) -> int:
        return rows * self.per_row + 5 * keys + 2 * rows * self.width


def stack_step(lib: ctypes.CDLL, stack: Stack, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, start: int,
               visible: torch.Tensor | None, threads: int, fine: bool) -> torch.Tensor:
    """Every layer of `stack` on x [rows, width] (float32 contiguous) in one call (specdec_stack_step), each layer's
    new keys and values stored at positions start .. start + rows - 1 of the buffers set in stack.keys / values (with
    their strides): the last layer's output [rows, width]. The same bits as layer_step layer by layer."""
    rows = x.shape[0]
    out = torch.empty_like(x)
    seen = None if visible is None else visible.data_ptr()
    status = lib.specdec_stack_step(stack.addresses, stack.count, x.data_ptr(), out.data_ptr(), rows, cos.data_ptr(),
                                    sin.data_ptr(), stack.keys, stack.values, stack.head_strides, stack.pos_strides,
                                    start, seen, _work(4 * stack.work_floats(rows, start + rows)).data_ptr(),
                                    _scratch(stack.widest * rows).data_ptr(), threads, fine)
    if status != 0:
        raise ValueError("the quantised kernel cannot take these layers' weights")
    return out


def layer_scratch_bytes(layer: Layer, rows: int) -> int:
    """The products' scratch for the widest input of a layer's weights."""
    return scratch_bytes(rows, max(layer.width, layer.heads * layer.dim, layer.inter))


def scratch_bytes(rows: int, cols: int) -> int:
    return rows * (2 * cols + 24 * (cols // 32)) + 64


def layout(lib: ctypes.CDLL | None) -> int:
    """How `lib` lays out a weight's values: 0, as pack_rows does (the natural layout); 1, interleaved so that each lane
    of a 512-bit vector sums one group (AVX-512 builds; see the C file). None: no kernel, the natural layout."""
    return 0 if lib is None else int(lib.specdec_layout())


def relayout(lib: ctypes.CDLL, data: torch.Tensor, kind: int, group: int, *, to_natural: bool = False) -> torch.Tensor:
    """data [rows, bytes] (pack_rows' layout, or `lib`'s with to_natural) in `lib`'s layout (or back): a new tensor,
    or data itself where the two layouts are one."""
    if layout(lib) == 0:
        return data
    data = data.contiguous()
    out = torch.empty_like(data)
    cols = data.shape[1] * (2 if kind == 0 else 1)
    if lib.specdec_relayout(kind, group, data.data_ptr(), out.data_ptr(), data.shape[0], cols, int(to_natural)) != 0:
        raise ValueError(f"the kernel cannot lay out a weight of {cols} columns in groups of {group}")
    return out


def narrow(lib: ctypes.CDLL, data: torch.Tensor, scales: torch.Tensor, offsets: torch.Tensor | None, *, group: int,
           tables: int, layout: int, cols: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A signed-byte weight's rows (data in `layout`, qkernel.layout's, with its scale tables of form `tables`;
    offsets None where it has none) requantised to 4 bits with a minimum per group of 32, as
    gguf_blocks.requantise(bits=4) but with each scale and minimum rounded to half precision first (as Q4_1 keeps
    them): the nibbles in pack_rows' natural layout [rows, cols / 2], the scales and the minimums [rows, cols / 32] as
    float32 (each a half's value)."""
    rows = data.shape[0]
    q4 = torch.empty(rows, cols // 2, dtype=torch.uint8)
    d4, m4 = torch.empty(rows, cols // 32), torch.empty(rows, cols // 32)
    if lib.specdec_narrow(group, tables, layout, data.data_ptr(), scales.data_ptr(),
                          None if offsets is None else offsets.data_ptr(), rows, cols, q4.data_ptr(), d4.data_ptr(),
                          m4.data_ptr()) != 0:
        raise ValueError(f"the kernel cannot narrow a weight of {cols} columns in groups of {group}")
    return q4, d4, m4


def matmul(lib: ctypes.CDLL, kind: int, data: torch.Tensor, scales: torch.Tensor, offsets: torch.Tensor | None,
           group: int, x: torch.Tensor, threads: int, activation_bytes: int = 2, tables: int = 0) -> torch.Tensor:
    """x [rows, cols] float32 contiguous times the weight's transpose: [rows, out] float32. `activation_bytes`: 2 (about
    15 bits of each activation) or 1 (as llama.cpp's quantised products). offsets None: a weight with none. `tables`
    1: `scales` holds a K-quant's own tables (compact_tables) and `offsets` only says whether it has offsets; 2:
    `scales` and `offsets` are half-precision floats (table_form)."""
    weight = (kind, data.data_ptr(), scales.data_ptr(), None if offsets is None else offsets.data_ptr(),
              scales.shape[0], group, tables)
    return product(lib, weight, x, threads, activation_bytes)


def product(lib: ctypes.CDLL, weight: tuple, x: torch.Tensor, threads: int, activation_bytes: int = 2) -> torch.Tensor:
    """`matmul` for a weight given as (kind, data, scales and offsets addresses, output rows, group, tables' form, ...),
    the offsets' None where all are zero: a decoding step makes a hundred or more of these calls, so each does no more
    than allocate its output and call the kernel."""
    rows, cols = x.shape
    out = torch.empty(rows, weight[4])
    scratch = _scratch(scratch_bytes(rows, cols))
    status = lib.specdec_qmatmul(weight[0], weight[1], weight[2], weight[3], weight[4], cols, weight[5], weight[6],
                                 x.data_ptr(), rows, out.data_ptr(), scratch.data_ptr(), threads, activation_bytes == 2)
    if status != 0:
        raise ValueError(f"the quantised kernel cannot take a weight of {cols} columns in groups of {weight[5]}")
    return out


_local = threading.local()
# GGUF block types the C decoder takes, by its numbering (specdec_decode); each value: (values per block, group,
# nibble-packed)
DECODED = {"Q4_0": (0, 32, 32, True), "Q4_1": (1, 32, 32, True), "Q5_0": (2, 32, 32, False),
           "Q5_1": (3, 32, 32, False), "Q8_0": (4, 32, 32, False), "Q4_K": (5, 256, 32, True),
           "Q5_K": (6, 256, 32, False), "Q6_K": (7, 256, 16, False)}


def decoded_shapes(type_name: str, rows: int, cols: int, tables: bool = False
                   ) -> tuple[tuple[int, int], tuple[int, int]]:
    """The shapes of a decoded tensor's data [rows, bytes] and of its scale and offset tables [rows, groups] (with
    `tables`, its own tables [rows, bytes], compact_tables)."""
    _, _, group, nibbles = DECODED[type_name]
    groups = cols // group
    return (rows, cols // 2 if nibbles else cols), (rows, k_table_bytes(group, groups) if tables else groups)


K_QUANTS = ("Q4_K", "Q5_K", "Q6_K")


# The types whose scales and offsets the file keeps as half-precision floats, one a group of 32.
HALF_TABLES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0")


def table_form(lib: ctypes.CDLL | None, type_name: str) -> int:
    """How `lib` keeps the scale tables of a tensor of `type_name` (the `tables` of its products): 1, the K-quant's own
    (compact_tables); 2, a half-precision scale and offset a group, as the file keeps them (AVX-512 builds: a weight of
    Q4_1 reads 20 bytes a group of 32 instead of 24); 0, a float32 scale and offset a group."""
    if compact_tables(lib, type_name):
        return 1
    return 2 if layout(lib) and type_name in HALF_TABLES else 0


def compact_tables(lib: ctypes.CDLL | None, type_name: str) -> bool:
    """Whether `lib` keeps a tensor of `type_name` with the K-quant's own scale tables (AVX-512 builds: a fifth fewer
    bytes a step for a Q4_K_M model) rather than a float scale and offset per group."""
    return layout(lib) == 1 and type_name in K_QUANTS


def k_table_bytes(group: int, groups: int) -> int:
    """Bytes of a row's own K-quant tables (the C file's k_table_bytes)."""
    return 3 * groups if group == 32 else groups + groups // 4


def k_tables_as_floats(table: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A K-quant's own tables [n, bytes] as the float scales and offsets [n, groups] (kernel order) the decoder gives:
    d * sc and -(dmin * mn), the same floats."""
    table = table.contiguous()
    n = table.shape[0]
    if group == 32:
        groups = table.shape[1] // 3
        sc, mn = table[:, :groups].float(), table[:, groups:2 * groups].float()
        floats = table[:, 2 * groups:].view(torch.float32)
        d = floats[:, :groups // 8].repeat_interleave(8, dim=1)
        dmin = floats[:, groups // 8:].repeat_interleave(8, dim=1)
        return d * sc, -(dmin * mn)
    groups = table.shape[1] * 4 // 5
    sc = table[:, :groups].view(torch.int8).float()
    d = table[:, groups:].view(torch.float32).repeat_interleave(16, dim=1)
    return d * sc, torch.zeros(n, groups)


def decode_into(lib: ctypes.CDLL, type_name: str, raw: np.ndarray, cols: int, order: np.ndarray | None,
                data: torch.Tensor, scales: torch.Tensor, offsets: torch.Tensor, tables: bool = False) -> None:
    """A GGUF tensor's blocks raw [rows, bytes per row] -> data, scales and offsets (contiguous, of decoded_shapes),
    in `lib`'s layout (`layout`); output row i is raw row order[i] when an order is given. With `tables`
    (compact_tables), `scales` [rows, bytes] receives the K-quant's own tables and `offsets` is not written."""
    number = DECODED[type_name][0]
    raw = np.ascontiguousarray(raw)
    rows = data.shape[0]
    index = None if order is None else np.ascontiguousarray(order, dtype=np.int32)
    assert data.is_contiguous() and scales.is_contiguous() and offsets.is_contiguous()
    status = lib.specdec_decode(number, raw.ctypes.data, rows, cols, None if index is None else index.ctypes.data,
                                data.data_ptr(), scales.data_ptr(), offsets.data_ptr(), int(tables))
    if status != 0:
        raise ValueError(f"the kernel cannot decode a {type_name} tensor of {cols} columns")


def _work(nbytes: int) -> torch.Tensor:
    """A second work buffer of at least `nbytes` for this thread (the layer functions' intermediate rows), kept apart
    from `_scratch`, which their products use meanwhile."""
    return _held("work", nbytes)


def _scratch(nbytes: int) -> torch.Tensor:
    """A work buffer of at least `nbytes` for this thread's calls (kept between calls; a draft thread has its own)."""
    return _held("buffer", nbytes)


def _held(name: str, nbytes: int) -> torch.Tensor:
    held = getattr(_local, name, None)
    if held is None or held.numel() < nbytes:
        held = torch.empty(max(nbytes, 1 << 16), dtype=torch.uint8)
        setattr(_local, name, held)
    return held


def rms_norm(lib: ctypes.CDLL, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Row-wise RMSNorm of x [rows, cols] float32 contiguous, each row alone."""
    out = torch.empty_like(x)
    lib.specdec_rmsnorm(x.data_ptr(), weight.data_ptr(), eps, x.shape[0], x.shape[1], out.data_ptr())
    return out


def rope_(lib: ctypes.CDLL, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads: int, dim: int) -> None:
    """Rotary embedding in place on x [rows, heads * dim] (rows may be strided); cos, sin [rows, dim] contiguous."""
    lib.specdec_rope(x.data_ptr(), x.stride(0), x.shape[0], heads, dim, cos.data_ptr(), sin.data_ptr())


def attend(lib: ctypes.CDLL, query: torch.Tensor, heads: int, key: torch.Tensor, value: torch.Tensor,
           visible: torch.Tensor | None, scale: float) -> torch.Tensor:
    """Each query row's attention alone over the keys it may see. query [rows, heads * dim] (rows may be strided);
    key, value [kv_heads, keys, dim] with the same strides; visible [rows, keys] uint8 contiguous, or None for causal
    rows that end the keys. Returns [rows, heads * dim]."""
    rows, dim = query.shape[0], key.shape[-1]
    kv_heads, keys = key.shape[0], key.shape[1]
    assert key.stride() == value.stride() and key.stride(2) == 1 and query.stride(1) == 1
    out = torch.empty((rows, heads * dim), dtype=torch.float32)
    scratch = _scratch(20 * keys)
    lib.specdec_attend(query.data_ptr(), query.stride(0), rows, heads, dim, key.data_ptr(), value.data_ptr(),
                       key.stride(0), key.stride(1), kv_heads, keys,
                       None if visible is None else visible.data_ptr(), scale, out.data_ptr(), scratch.data_ptr())
    return out


def _self_check(lib: ctypes.CDLL) -> bool:
    """Small products against the same maths in numpy, each row alone and all rows together, for each layout (4-bit,
    8-bit, groups of 16), with a row length that leaves a tail after the last whole four blocks."""
    from specdec_core.loading.gguf_blocks import Grouped, requantise

    rng = np.random.default_rng(7)
    weight = rng.standard_normal((96, 224)).astype(np.float32)
    x = torch.from_numpy(rng.standard_normal((5, 224)).astype(np.float32))
    eight = requantise(weight, bits=8)
    sixteens = Grouped(q=eight.q, d=np.repeat(eight.d, 2, axis=1) * rng.uniform(0.5, 1.5, (96, 14)).astype(np.float32),
                       m=rng.standard_normal((96, 14)).astype(np.float32) * 0.01, group=16, nibbles=False)
    for grouped in (requantise(weight, bits=4), eight, sixteens):
        kind = 0 if grouped.nibbles else 1
        data = relayout(lib, torch.from_numpy(pack_rows(grouped.q, nibbles=grouped.nibbles)), kind, grouped.group)
        scales = torch.from_numpy(kernel_order(grouped.d, grouped.group))
        offsets = torch.from_numpy(kernel_order(grouped.m, grouped.group))
        expected = x.numpy() @ grouped.dequantise().T
        for size in (2, 1):
            together = matmul(lib, kind, data, scales, offsets, grouped.group, x, 2, size)
            alone = torch.cat([matmul(lib, kind, data, scales, offsets, grouped.group, x[i:i + 1].contiguous(), 1,
                                      size) for i in range(x.shape[0])])
            if not torch.equal(together, alone) or not np.allclose(together.numpy(), expected, rtol=0.05, atol=0.5):
                return False
    return True


def pack_rows(q: np.ndarray, *, nibbles: bool) -> np.ndarray:
    """q [rows, cols] -> the kernel's layout: two 4-bit values a byte (value j and j + 16 of each group of 32 share
    byte j), or the signed bytes as they are."""
    if not nibbles:
        return np.ascontiguousarray(q.astype(np.int8, copy=False))
    rows, cols = q.shape
    groups = q.reshape(rows, cols // 32, 2, 16).astype(np.uint8)
    return np.ascontiguousarray((groups[:, :, 0, :] | (groups[:, :, 1, :] << 4)).reshape(rows, cols // 2))


def kernel_order(table: np.ndarray, group: int) -> np.ndarray:
    """A weight's per-group table [rows, groups] in the order the kernel reads it. Groups of 32 stay in order; groups
    of 16 (two per block) are laid out per four blocks as their four first halves, then their four second halves,
    with the last 1-3 blocks in order (the C file's `half_index`)."""
    if group == 32:
        return np.ascontiguousarray(table, dtype=np.float32)
    rows, groups = table.shape
    blocks = groups // 2
    whole = blocks // 4 * 4
    quads = table[:, :whole * 2].reshape(rows, whole // 4, 4, 2).transpose(0, 1, 3, 2).reshape(rows, whole * 2)
    return np.ascontiguousarray(np.concatenate([quads, table[:, whole * 2:]], axis=1), dtype=np.float32)

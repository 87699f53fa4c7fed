"""Lossless JPEG transcoding to the restart grid, through the libjpeg-turbo in Pillow's wheel.

What ``jpegtran -restart 1B -copy none`` does: read the DCT coefficients
(``jpeg_read_coefficients``), write them again with a restart marker after every MCU
(``jpeg_write_coefficients``, ``restart_interval = 1``) as one baseline scan with the
standard Huffman tables (``optimize=True`` makes the file smaller, for a second pass).
The coefficients are untouched, so the pixels are exactly the source's; progressive
JPEGs become baseline. Pip-only: Pillow's wheel bundles libjpeg-turbo and exports this API; no other wheel ships a TurboJPEG 3 with
restart-interval transforms, and a pure-Python Huffman re-encoder is far too slow.

Calling libjpeg through ctypes needs two things a C caller gets from the headers:
- The libjpeg 6.2 ABI (``JPEG_LIB_VERSION`` 62) struct sizes and field offsets, for
  64-bit Unix (LP64) below. ``jpeg_Create*`` checks the sizes itself, and every output
  is parsed as a grid before it is used.
- An ``error_exit`` that does not return into libjpeg (its default calls exit(); a C
  caller longjmps, which a Python callback cannot). Transcodes run on long-lived worker
  threads, one per concurrent caller, reused; on a fatal error the callback reports it to
  the caller and then blocks its worker for good, abandoning the half-done libjpeg state
  instead of resuming it (a new worker takes its place). Fatal errors come only from
  structural faults (an undefined table, a second SOF, an unknown marker), which
  `jpeg_structure` finds first, so they do not reach libjpeg; should one get through,
  each costs a parked thread, and after ``MAX_PARKED`` of them the pack stops with a
  PackError instead of leaking more. Warnings (corrupt or cut-short data) are counted by
  libjpeg; as for a strict decode, the first one decides (`jpeg_warnings.is_benign`): a
  benign one keeps the transcode and is handed back, any other makes the file corrupt.
"""
from __future__ import annotations

import ctypes
import glob
import logging
import os
import queue
import threading

from feedline.decoders.jpeg_warnings import is_benign
from feedline.core.errors import PackError

from .jpeg_structure import StructureError, check_structure

log = logging.getLogger(__name__)

_VERSION = 62
_DECOMPRESS_SIZE, _COMPRESS_SIZE, _ERROR_MGR_SIZE = 632, 520, 168   # sizeof the 6.2 structs, LP64
_ERR_EXIT, _ERR_OUTPUT_MESSAGE, _ERR_FORMAT_MESSAGE, _ERR_NUM_WARNINGS = 0, 16, 24, 128
_OPTIMIZE_CODING, _RESTART_INTERVAL, _RESTART_IN_ROWS = 264, 280, 284   # in jpeg_compress_struct
_MSG_LENGTH_MAX = 200

_ErrorExit = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_FormatMessage = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p)


class TranscodeError(Exception):
    """libjpeg-turbo cannot read the file's image data cleanly."""


def pillow_libjpeg_path() -> str:
    """The libjpeg-turbo shared library inside Pillow's wheel."""
    import PIL
    from PIL import Image  # noqa: F401 -- loads _imaging, which loads the library
    base = os.path.dirname(PIL.__file__)
    found = sorted(glob.glob(os.path.join(base, os.pardir, "pillow.libs", "libjpeg-*.so*")) +
                   glob.glob(os.path.join(base, ".dylibs", "libjpeg*.dylib")))
    if not found:
        raise PackError("--layout grid needs the libjpeg-turbo that Pillow's wheels bundle, and this Pillow "
                        f"({base}) has none (built from source?): pip install --force-reinstall pillow, "
                        "or pack with --layout original")
    return os.path.abspath(found[0])


class _Library:
    """The functions used, with their C signatures."""

    def __init__(self, path: str):
        if ctypes.sizeof(ctypes.c_void_p) != 8 or ctypes.sizeof(ctypes.c_long) != 8:
            raise PackError("--layout grid knows libjpeg's structures on 64-bit Linux and macOS only; "
                            "pack with --layout original here")
        lib = ctypes.CDLL(path)
        p, u, i = ctypes.c_void_p, ctypes.c_ulong, ctypes.c_int
        for name, restype, argtypes in [
                ("jpeg_std_error", p, [p]), ("jpeg_CreateDecompress", None, [p, i, ctypes.c_size_t]),
                ("jpeg_CreateCompress", None, [p, i, ctypes.c_size_t]), ("jpeg_mem_src", None, [p, p, u]),
                ("jpeg_mem_dest", None, [p, ctypes.POINTER(p), ctypes.POINTER(u)]),
                ("jpeg_read_header", i, [p, i]), ("jpeg_read_coefficients", p, [p]),
                ("jpeg_copy_critical_parameters", None, [p, p]), ("jpeg_write_coefficients", None, [p, p]),
                ("jpeg_finish_compress", None, [p]), ("jpeg_finish_decompress", i, [p]),
                ("jpeg_destroy_compress", None, [p]), ("jpeg_destroy_decompress", None, [p])]:
            function = getattr(lib, name)
            function.restype, function.argtypes = restype, argtypes
            setattr(self, name, function)
        libc = ctypes.CDLL(None)
        self.free = libc.free
        self.free.argtypes, self.free.restype = [p], None


_lock = threading.Lock()
_library: _Library | None = None
_calls: dict[int, "_Call"] = {}      # the address of a libjpeg struct -> the call it belongs to
_parked = 0
_idle: list["_Worker"] = []          # workers waiting for a call
MAX_PARKED = 16                      # fatal errors tolerated per process (see the module docstring)


def _lib() -> _Library:
    global _library
    if _library is None:
        with _lock:
            if _library is None:
                _library = _Library(pillow_libjpeg_path())
    return _library


_checked = False


def _check_library() -> None:
    """Transcode one small JPEG made here: a library whose structures differ from the
    6.2 layout above fails here, once, instead of every file failing as corrupt."""
    global _checked
    if _checked:
        return
    import io

    from PIL import Image

    from feedline.decoders.jpeg_grid import parse_grid
    probe = io.BytesIO()
    Image.new("RGB", (24, 16), (90, 140, 200)).save(probe, "JPEG", quality=90)
    call = _Call(probe.getvalue(), False)
    _run(call)
    try:
        if call.exception is not None or call.error is not None:
            raise ValueError(call.error or call.exception)
        layout = parse_grid(call.result)
        if (layout.height, layout.width, len(layout.markers)) != (16, 24, 1):   # two 16x16 MCUs
            raise ValueError(f"a {layout.width}x{layout.height} grid with {len(layout.markers)} markers")
    except Exception as exc:  # noqa: BLE001 -- whatever went wrong, this library is not usable here
        raise PackError(f"--layout grid: the libjpeg-turbo in Pillow's wheel ({pillow_libjpeg_path()}) does not "
                        f"transcode as expected ({exc}); pack with --layout original") from None
    _checked = True


class _Worker:
    """A thread that runs the transcodes handed to it, one at a time, until one parks it."""

    def __init__(self):
        self.calls: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._loop, name="libjpeg-transcode", daemon=True).start()

    def _loop(self) -> None:
        while True:
            self.calls.get().run()


def _run(call: "_Call") -> None:
    with _lock:
        if _parked >= MAX_PARKED:
            raise PackError(f"--layout grid: {_parked} files stopped libjpeg-turbo with a fatal error (the "
                            f"last: {_last_fatal!r}) although their markers looked sound; each leaves a parked "
                            "thread, so the pack stops here. Remove the files skipped as corrupt (see the log) "
                            "and pack again, or pack with --layout original")
        worker = _idle.pop() if _idle else None
    worker = worker or _Worker()
    worker.calls.put(call)
    call.done.wait()
    if not call.parked:
        with _lock:
            _idle.append(worker)


def _message(cinfo: int) -> str:
    err = ctypes.c_void_p.from_address(cinfo).value
    format_message = _FormatMessage(ctypes.c_void_p.from_address(err + _ERR_FORMAT_MESSAGE).value)
    text = ctypes.create_string_buffer(_MSG_LENGTH_MAX)
    format_message(cinfo, text)
    return text.value.decode("latin-1")


_last_fatal = ""


@_ErrorExit
def _error_exit(cinfo):
    global _parked, _last_fatal
    call = _calls.get(cinfo)
    message = _message(cinfo)
    with _lock:
        _parked += 1
        _last_fatal = message
    log.warning("libjpeg-turbo: fatal error %r while transcoding; its thread is parked for good "
                "(%d so far)", message, _parked)
    if call is not None:
        call.parked = True
        call.finish(None, message)
    threading.Event().wait()   # never return into libjpeg, which would carry on with broken state


@_ErrorExit
def _output_message(cinfo):
    """libjpeg prints its first warning through this: keep it for the error, print nothing."""
    call = _calls.get(cinfo)
    if call is not None and call.warning is None:
        call.warning = _message(cinfo)


class _Call:
    """One transcode, run on its own thread (see the module docstring for why)."""

    def __init__(self, data: bytes, optimize: bool):
        self.data, self.optimize = data, optimize
        self.done = threading.Event()
        self.result: bytes | None = None
        self.error: str | None = None
        self.exception: BaseException | None = None
        self.warning: str | None = None
        self.parked = False

    def finish(self, result: bytes | None, error: str | None) -> None:
        self.result, self.error = result, error
        self.done.set()

    def run(self) -> None:
        try:
            self._transcode(_lib())
        except BaseException as exc:  # noqa: BLE001 -- handed to the caller's thread, raised there
            self.exception = exc
            self.done.set()

    def _transcode(self, lib: _Library) -> None:
        src, dst = ctypes.create_string_buffer(_DECOMPRESS_SIZE), ctypes.create_string_buffer(_COMPRESS_SIZE)
        src_err, dst_err = ctypes.create_string_buffer(_ERROR_MGR_SIZE), ctypes.create_string_buffer(_ERROR_MGR_SIZE)
        for struct, err in ((src, src_err), (dst, dst_err)):
            lib.jpeg_std_error(err)
            ctypes.c_void_p.from_buffer(err, _ERR_EXIT).value = ctypes.cast(_error_exit, ctypes.c_void_p).value
            ctypes.c_void_p.from_buffer(err, _ERR_OUTPUT_MESSAGE).value = \
                ctypes.cast(_output_message, ctypes.c_void_p).value
            ctypes.c_void_p.from_buffer(struct, 0).value = ctypes.addressof(err)
            _calls[ctypes.addressof(struct)] = self
        # The references keep the buffers alive while libjpeg uses them, on a parked thread too.
        self._keep = (src, dst, src_err, dst_err)
        out, size = ctypes.c_void_p(), ctypes.c_ulong()
        try:
            lib.jpeg_CreateDecompress(src, _VERSION, _DECOMPRESS_SIZE)
            lib.jpeg_CreateCompress(dst, _VERSION, _COMPRESS_SIZE)
            lib.jpeg_mem_src(src, self.data, len(self.data))
            lib.jpeg_read_header(src, 1)
            coefficients = lib.jpeg_read_coefficients(src)
            lib.jpeg_mem_dest(dst, ctypes.byref(out), ctypes.byref(size))
            lib.jpeg_copy_critical_parameters(src, dst)
            ctypes.c_uint.from_buffer(dst, _RESTART_INTERVAL).value = 1
            ctypes.c_int.from_buffer(dst, _RESTART_IN_ROWS).value = 0
            ctypes.c_int.from_buffer(dst, _OPTIMIZE_CODING).value = int(self.optimize)
            lib.jpeg_write_coefficients(dst, coefficients)
            lib.jpeg_finish_compress(dst)
            lib.jpeg_finish_decompress(src)
            if ctypes.c_long.from_buffer(src_err, _ERR_NUM_WARNINGS).value:
                self.warning = self.warning or _message(ctypes.addressof(src))
            benign = self.warning is None or is_benign(self.warning)
            result = ctypes.string_at(out.value, size.value) if benign else None
            error = None if benign else self.warning
            lib.jpeg_destroy_compress(dst)
            lib.jpeg_destroy_decompress(src)
            if out.value:
                lib.free(out)
        finally:
            _calls.pop(ctypes.addressof(src), None)
            _calls.pop(ctypes.addressof(dst), None)
        self.finish(result, error)


def transcode_to_grid(data: bytes, optimize: bool = False) -> bytes:
    """``data`` (a JPEG) with a restart marker after every MCU, losslessly, as one baseline
    scan; TranscodeError when libjpeg-turbo meets damaged data (a warning that is not benign,
    or a fatal error)."""
    return transcode_to_grid_warned(data, optimize)[0]


def transcode_to_grid_warned(data: bytes, optimize: bool = False) -> tuple[bytes, str | None]:
    """`transcode_to_grid`, and libjpeg's benign warning (`jpeg_warnings`) if it met one."""
    if len(data) < 4:
        raise TranscodeError("too short to be a JPEG")
    try:
        check_structure(data)     # libjpeg's fatal errors, found before libjpeg meets them
    except StructureError as exc:
        raise TranscodeError(f"broken JPEG structure: {exc}") from None
    _check_library()
    call = _Call(bytes(data), optimize)
    _run(call)
    if call.exception is not None:
        raise call.exception
    if call.error is not None:
        raise TranscodeError(call.error)
    return call.result, call.warning

"""Per-kernel machine-code digests of a cubin: which kernels of two candidates are the same one.

Genes are often per head dim (flash_wgmma's ``*_D64`` / ``*_D128``), so candidates that differ
only in D=64 genes carry byte-identical D=128 kernels. GREEN draws its inputs per candidate, so
one kernel can pass one candidate's draws and fail another's: in study wgmma3 (2026-11-25) the
best candidate's D=128 fp16 kernel was, byte for byte, the kernel of a candidate that failed
GREEN. :func:`kernel_digests` names each kernel function by a digest of what decides its
behaviour: its code (``.text.<fn>``), its constant bank 0 (``.nv.constant0.<fn>``: parameter
layout and compiled-in constants), its attributes (``.nv.info.<fn>``: registers, barriers,
parameter offsets) and its static shared memory size (``.nv.shared.<fn>``). Relocation sections
are left out: they index a symbol table whose order depends on the other functions of the file.
So does one attribute, the constant bank of the parameters (``EIATTR_PARAM_CBANK``: a symbol
index, then the bank's offset and size). ``portable`` digests zero that index before hashing:
the same kernel compiled beside 15 others or beside 3 (a search's kernel subset) then has one
digest; its code, constants and every other attribute were byte for byte the same (flash_wgmma's
default, nvcc 13.0, sm_90a). The plain digests (``portable=False``) are the ones stored before
subsets existed, and are kept beside the portable ones so that old records still match.

A cubin is ELF64, little-endian (CUDA emits nothing else); anything else (a Triton module
written as a path to Python source) has no digests.
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

_PARTS = (".text.", ".nv.constant0.", ".nv.info.", ".nv.shared.")
_NOBITS = 8            # section type without file bytes (.nv.shared: only its size counts)
_SVAL = 4              # .nv.info record format with a sized value (format, attribute, u16 size, value)
_PARAM_CBANK = 0x0A    # .nv.info attribute: the parameters' constant bank (symbol index first)


def _sections(data: bytes) -> dict[str, bytes]:
    """Section name -> its bytes (for NOBITS sections: the size, as 8 bytes)."""
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]
    out = {}
    for name_off, kind, _flags, _addr, offset, size, *_ in headers:
        start = names_at + name_off
        name = data[start:data.index(b"\0", start)].decode("ascii", "replace")
        out[name] = struct.pack("<Q", size) if kind == _NOBITS else data[offset:offset + size]
    return out


def _without_symbol_indices(info: bytes) -> bytes:
    """``.nv.info.<fn>`` with the symbol index of its parameter-bank attribute zeroed (records:
    format and attribute bytes, then a u16 size and the value for the sized format, else two bytes)."""
    out, i = bytearray(info), 0
    while i + 4 <= len(out):
        fmt, attr = out[i], out[i + 1]
        size = struct.unpack_from("<H", out, i + 2)[0] if fmt == _SVAL else 0
        if fmt == _SVAL and attr == _PARAM_CBANK and size >= 4:
            out[i + 4:i + 8] = bytes(4)
        i += 4 + size
    return bytes(out)


def kernel_digests(cubin: bytes | str | Path, portable: bool = False) -> dict[str, str]:
    """Kernel function name -> sha256 of its code, constants, attributes and shared memory size
    (``portable``: without the file's symbol index, module docstring); empty when ``cubin`` is
    not an ELF64 little-endian file."""
    data = cubin if isinstance(cubin, bytes) else Path(cubin).read_bytes()
    if len(data) < 0x40 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return {}
    try:
        sections = _sections(data)
    except (struct.error, ValueError, IndexError):
        return {}
    out = {}
    for fn in sorted(n[len(".text."):] for n in sections if n.startswith(".text.")):
        h = hashlib.sha256()
        for part in _PARTS:
            body = sections.get(part + fn, b"")
            if portable and part == ".nv.info.":
                body = _without_symbol_indices(body)
            h.update(part.encode() + struct.pack("<Q", len(body)) + body)
        out[fn] = h.hexdigest()
    return out

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

A cubin is ELF64, little-endian (CUDA emits nothing else); anything else (a Triton module
written as a path to Python source) has no digests.
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

_PARTS = (".text.", ".nv.constant0.", ".nv.info.", ".nv.shared.")
_NOBITS = 8            # section type without file bytes (.nv.shared: only its size counts)


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


def kernel_digests(cubin: bytes | str | Path) -> dict[str, str]:
    """Kernel function name -> sha256 of its code, constants, attributes and shared memory size;
    empty when ``cubin`` is not an ELF64 little-endian file."""
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
            h.update(part.encode() + struct.pack("<Q", len(body)) + body)
        out[fn] = h.hexdigest()
    return out

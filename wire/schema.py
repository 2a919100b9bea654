"""Declarative message schemas and the codecs compiled from them.

A message is described once, as a tree of `F` fields (name, type, versions, nullable
versions, tag). From that one description this module derives, for every version:
a Python class per struct (fields as attributes), a decoder and an encoder. Codecs are
compiled lazily, per struct and version, into straight-line functions that call one
reader or writer per field.

Rules implemented here (they hold for every message):
- A field absent from a version decodes to its default and is not encoded.
- Flexible versions use compact lengths (unsigned varint of length + 1) for strings,
  bytes, records and arrays, and end every struct with a tagged-field section.
- Tagged fields are written only when they differ from their default, in ascending tag
  order; unknown tags are kept as raw bytes and written back unchanged.
- A non-array struct field that is nullable carries an int8 marker: -1 null, 1 present.
- An `Encoded` nested struct (from `encode_part`) is written verbatim where a struct of
  its class is due, at the version and flexibility it was encoded for, and refused elsewhere.
"""

from __future__ import annotations

import struct
import uuid
from typing import Callable

from wire.primitives import ZERO_UUID, DecodeError, EncodeError, Reader, Writer

__all__ = ["F", "Api", "Data", "Encoded", "Struct", "VersionRange"]

_MISSING = object()
_PRIMITIVES = ("int8", "int16", "int32", "int64", "uint16", "uint32", "float64", "bool", "uuid",
               "string", "bytes", "records")
_ZERO = {"int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint16": 0, "uint32": 0,
         "float64": 0.0, "bool": False, "uuid": ZERO_UUID, "string": "", "bytes": b"",
         "records": None}


class VersionRange:
    """A Kafka version range: "3+", "0-5", "7" or "none"."""

    __slots__ = ("lo", "hi", "text")

    def __init__(self, text: str):
        self.text = text
        if text == "none":
            self.lo, self.hi = 1, 0
        elif text.endswith("+"):
            self.lo, self.hi = int(text[:-1]), 0x7FFF
        elif "-" in text:
            lo, hi = text.split("-")
            self.lo, self.hi = int(lo), int(hi)
        else:
            self.lo = self.hi = int(text)

    def __contains__(self, version: int) -> bool:
        return self.lo <= version <= self.hi

    def __repr__(self) -> str:
        return f"VersionRange({self.text!r})"


class F:
    """One field: `type` is a primitive name, "[]primitive", "[]Struct" or "Struct"."""

    __slots__ = ("name", "type", "versions", "nullable", "tag", "tagged", "default",
                 "fields", "flexible")

    def __init__(self, name: str, type: str, versions: str, *, nullable: str = "none",
                 tag: int | None = None, tagged: str | None = None, default=_MISSING,
                 flexible: str | None = None, fields: tuple["F", ...] = ()):
        self.name = name
        self.type = type
        self.versions = VersionRange(versions)
        self.nullable = VersionRange(nullable)
        self.tag = tag
        self.tagged = VersionRange(tagged if tagged is not None else (versions if tag is not None else "none"))
        self.fields = fields
        self.flexible = VersionRange(flexible) if flexible is not None else None
        elem = self.element_type
        if fields and elem in _PRIMITIVES:
            raise ValueError(f"{name}: primitive type {type} cannot have fields")
        if not fields and elem not in _PRIMITIVES:
            raise ValueError(f"{name}: struct type {type} needs fields")
        self.default = default

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:] if self.is_array else self.type


class Struct:
    """Base of every generated struct class: fields are plain attributes, set by a
    keyword-only `__init__` generated per class (absent fields get their defaults)."""

    __slots__ = ("unknown_tags",)
    _fields: tuple = ()
    _factories: tuple = ()

    def __eq__(self, other) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(_same(getattr(self, n), getattr(other, n)) for n in self._fields) and \
            (self.unknown_tags or None) == (other.unknown_tags or None)

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._fields)
        return f"{type(self).__name__}({inner})"


def _signature(spec: F) -> tuple:
    return tuple((f.name, f.type, f.versions.text, f.nullable.text, f.tag, _signature(f))
                 for f in spec.fields)


def _same(a, b) -> bool:
    if isinstance(a, memoryview):
        a = a.tobytes()
    if isinstance(b, memoryview):
        b = b.tobytes()
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


class Encoded:
    """A nested struct encoded once, to be written verbatim in later messages: for large parts
    of responses that rarely change (a server's topic metadata), built and encoded once instead
    of per request."""

    __slots__ = ("cls", "version", "flexible", "data")

    def __init__(self, cls: type, version: int, flexible: bool, data: bytes):
        self.cls, self.version, self.flexible, self.data = cls, version, flexible, data

    def __repr__(self) -> str:
        return f"Encoded({self.cls.__name__} v{self.version}, {len(self.data)} bytes)"


class _Schema:
    """A root struct (request, response or data record) with its version rules."""

    def __init__(self, name: str, versions: str, flexible: str, fields: tuple[F, ...]):
        self.name = name
        self.versions = VersionRange(versions)
        self.flexible = VersionRange(flexible)
        self.root = F(name, name, "0+", fields=fields)
        self.struct_classes: dict[str, type] = {}
        self.cls = self._make_class(self.root)
        self._codecs: dict[int, tuple] = {}
        self._struct_writers: dict[tuple, Callable] = {}  # (class, version, flexible) -> write

    def __call__(self, **values) -> Struct:
        """A new body: `PRODUCE.request(acks=-1, ...)`."""
        return self.cls(**values)

    def __getattr__(self, name: str) -> type:
        """Nested struct classes by their Kafka name: `PRODUCE.request.TopicProduceData`."""
        try:
            return self.__dict__["struct_classes"][name]
        except KeyError:
            raise AttributeError(f"{self.__dict__.get('name')} has no struct {name}") from None

    # -- classes -------------------------------------------------------------------
    def _make_class(self, spec: F) -> type:
        cls_name = spec.element_type
        existing = self.struct_classes.get(cls_name)
        if existing is not None:
            # A shared struct (Kafka's "commonStructs") appears once per use site.
            if existing._spec_signature != _signature(spec):
                raise ValueError(f"{self.name}: two different structs named {cls_name}")
            return existing
        names = tuple(f.name for f in spec.fields)
        defaults = tuple(self._default(f) for f in spec.fields)
        factories = tuple(value if fresh else (lambda value=value: value) for fresh, value in defaults)
        cls = type(cls_name, (Struct,), {"__slots__": names, "_fields": names,
                                          "_factories": factories, "_spec_signature": _signature(spec),
                                          "__init__": _make_init(cls_name, names, defaults),
                                          "__module__": "wire.messages"})
        self.struct_classes[cls_name] = cls
        return cls

    def _default(self, f: F) -> tuple[bool, object]:
        """(True, factory) for a default built fresh each time (a list or a struct),
        (False, value) for an immutable one."""
        sub = self._make_class(f) if f.fields else None
        if f.default is not _MISSING:
            if (f.is_array or sub is not None) and f.default is not None:
                raise ValueError(f"{f.name}: only null is a valid default for {f.type}")
            return False, f.default
        if f.is_array:
            return True, list
        if sub is not None:
            return True, sub
        return False, _ZERO[f.type]

    # -- codecs --------------------------------------------------------------------
    def codec(self, version: int) -> tuple:
        """(read, write) for `version`: read(Reader) -> struct, write(Writer, struct)."""
        codec = self._codecs.get(version)
        if codec is None:
            if version not in self.versions:
                raise EncodeError(f"{self.name} has no version {version} "
                                  f"(valid: {self.versions.text})")
            codec = self._codecs[version] = _compile_struct(self, self.root, version,
                                                        version in self.flexible)
        return codec

    def encode_part(self, version: int, obj: Struct) -> Encoded:
        """`obj`, a nested struct of this message, encoded as it appears at `version`."""
        self.codec(version)
        write = self._struct_writers.get((type(obj), version, version in self.flexible))
        if write is None:
            raise EncodeError(f"{self.name} v{version} has no nested struct {type(obj).__name__}")
        writer = Writer()
        write(writer, obj)
        return Encoded(type(obj), version, version in self.flexible, writer.getvalue())

    def decode(self, version: int, data) -> Struct:
        """Decode exactly `data` (every byte must be consumed)."""
        reader = data if isinstance(data, Reader) else Reader(data)
        obj = self.codec(version)[0](reader)
        if not isinstance(data, Reader) and reader.remaining:
            raise DecodeError(f"{self.name} v{version}: {reader.remaining} trailing bytes")
        return obj

    def encode(self, version: int, obj: Struct, writer: Writer | None = None) -> Writer:
        writer = Writer() if writer is None else writer
        if not isinstance(obj, self.cls):
            raise EncodeError(f"expected {self.name}, got {type(obj).__name__}")
        self.codec(version)[1](writer, obj)
        return writer


class Api:
    """A Kafka API: key, name, valid and flexible versions, request and response bodies."""

    def __init__(self, key: int, name: str, versions: str, *, flexible: str,
                 request: tuple[F, ...], response: tuple[F, ...]):
        self.key = key
        self.name = name
        self.versions = VersionRange(versions)
        self.flexible = VersionRange(flexible)
        self.request = _Schema(name + "Request", versions, flexible, request)
        self.response = _Schema(name + "Response", versions, flexible, response)

    def __repr__(self) -> str:
        return f"Api({self.key}, {self.name!r}, {self.versions.text!r})"


class Data(_Schema):
    """A versioned structure outside the request/response protocol (stored records,
    consumer-protocol metadata), written after an int16 version."""

    def __init__(self, name: str, versions: str, *, flexible: str, fields: tuple[F, ...]):
        super().__init__(name, versions, flexible, fields)

    def encode_versioned(self, version: int, obj: Struct) -> bytes:
        writer = Writer()
        writer.int16(version)
        return self.encode(version, obj, writer).getvalue()

    def decode_versioned(self, data) -> tuple[int, Struct]:
        """(version, struct). A version newer than ours is read as our newest, leaving
        the fields it added unread, as Kafka's readers do for forward compatibility."""
        reader = Reader(data)
        version = reader.int16()
        if version < self.versions.lo:
            raise DecodeError(f"{self.name} version {version} is older than {self.versions.lo}")
        if version > self.versions.hi:
            return version, self.decode(self.versions.hi, reader)
        obj = self.decode(version, reader)
        if reader.remaining:
            raise DecodeError(f"{self.name} v{version}: {reader.remaining} trailing bytes")
        return version, obj


# -- compilation ----------------------------------------------------------------------

def _compile_struct(schema: _Schema, spec: F, version: int, flexible: bool) -> tuple:
    cls = schema.struct_classes[spec.element_type]
    regular: list[tuple[str, Callable, Callable, str | None]] = []  # + struct code if fixed-width
    # tag -> (name, read, write, the default: a tagged field equal to it is not written)
    tagged: dict[int, tuple[str, Callable, Callable, object]] = {}
    absent: list[tuple[str, Callable]] = []
    for f, factory in zip(spec.fields, cls._factories):
        if version not in f.versions:
            absent.append((f.name, factory))
            continue
        field_flexible = flexible and (f.flexible is None or version in f.flexible)
        read, write = _compile_field(schema, f, version, field_flexible)
        if flexible and version in f.tagged:
            tagged[f.tag] = (f.name, read, write, factory())  # built once: only compared with
            absent.append((f.name, factory))  # set to default unless the tag is present
        else:
            regular.append((f.name, read, write, None if f.is_array else _FIXED.get(f.type)))
    env = {"_new": cls.__new__, "_cls": cls, "_tagged": tagged, "_tag_order": sorted(tagged),
           "_read_tags": _read_tags, "_write_tags": _write_tags, "_explain": _explain,
           "EncodeError": EncodeError, "StructError": struct.error}
    read_lines = ["def read_struct(r):", "    obj = _new(_cls)"]
    for i, (name, factory) in enumerate(absent):
        env[f"_absent{i}"] = factory
        read_lines.append(f"    obj.{name} = _absent{i}()")
    write_lines = ["def write_struct(w, obj):", "    try:"]
    for i, run in enumerate(_runs(regular)):
        if len(run) == 1:
            name, read, write, _ = run[0]
            env[f"_read{i}"], env[f"_write{i}"] = read, write
            read_lines.append(f"    obj.{name} = _read{i}(r)")
            write_lines.append(f"        _write{i}(w, obj.{name})")
            continue
        # Fixed-width fields in a row: one struct unpacks or packs all of them.
        layout = struct.Struct(">" + "".join(code for *_, code in run))
        env[f"_unpack{i}"], env[f"_pack{i}"], env[f"_run{i}"] = layout.unpack_from, layout.pack, run
        targets = ", ".join(f"obj.{name}" for name, *_ in run)
        read_lines.append(f"    {targets} = _unpack{i}(r.buf, r._advance({layout.size}))")
        write_lines += ["        try:",
                        f"            w.buf += _pack{i}({targets})",
                        "        except (StructError, TypeError):",
                        f"            _explain(obj, _run{i})"]
    read_lines.append("    obj.unknown_tags = _read_tags(r, obj, _tagged)" if flexible else
                      "    obj.unknown_tags = None")
    read_lines.append("    return obj")
    write_lines += ["        pass", "    except AttributeError as exc:",
                    "        raise EncodeError(f'{type(obj).__name__}: {exc}') from None"]
    if flexible:
        write_lines.append("    _write_tags(w, obj, _tagged, _tag_order)")
    where = f"{spec.element_type} v{version}"
    read_struct = _generated("read_struct", read_lines, env, where)
    write_struct = schema._struct_writers[cls, version, flexible] = \
        _generated("write_struct", write_lines, env, where)
    return read_struct, write_struct


_FIXED = {"int8": "b", "int16": "h", "int32": "i", "int64": "q", "uint16": "H", "uint32": "I",
          "float64": "d"}


def _runs(regular: list) -> list[list]:
    """The fields in order, consecutive fixed-width ones grouped into one run."""
    runs: list[list] = []
    for field in regular:
        if field[3] is not None and runs and runs[-1][-1][3] is not None:
            runs[-1].append(field)
        else:
            runs.append([field])
    return runs


def _explain(obj, run: list) -> None:
    """A value of a packed run did not fit: the field's own writer names it."""
    for name, _, write, _ in run:
        write(Writer(), getattr(obj, name))
    raise EncodeError(f"{type(obj).__name__}: a field does not fit its type")


def _generated(name: str, lines: list[str], env: dict, where: str) -> Callable:
    """Compile straight-line code for one struct: a loop over its fields would run for
    every field of every message, and the broker decodes and encodes each request."""
    namespace: dict = {}
    exec(compile("\n".join(lines), f"<wire.schema {where}>", "exec"), env, namespace)
    return namespace[name]


def _make_init(cls_name: str, names: tuple, defaults: tuple) -> Callable:
    """`__init__(self, *, field=default, ..., unknown_tags=None)` for one struct class."""
    env = {"_MISSING": _MISSING}
    params, body = [], []
    for i, (name, (fresh, value)) in enumerate(zip(names, defaults)):
        if fresh:
            env[f"_fresh{i}"] = value
            params.append(f"{name}=_MISSING")
            body.append(f"    self.{name} = _fresh{i}() if {name} is _MISSING else {name}")
        else:
            env[f"_default{i}"] = value
            params.append(f"{name}=_default{i}")
            body.append(f"    self.{name} = {name}")
    params.append("unknown_tags=None")
    body.append("    self.unknown_tags = unknown_tags")
    init = _generated("__init__", [f"def __init__(self, *, {', '.join(params)}):"] + body, env, cls_name)
    init.__qualname__ = f"{cls_name}.__init__"
    return init


def _read_tags(r: Reader, obj, tagged: dict) -> dict | None:
    unknown = None
    last = -1
    for _ in range(r.uvarint()):
        tag = r.uvarint()
        if tag <= last:
            raise DecodeError(f"tag {tag} out of order after {last}")
        last = tag
        size = r.uvarint()
        body = r.take(size)
        known = tagged.get(tag)
        if known is None:
            if unknown is None:
                unknown = {}
            unknown[tag] = bytes(body)
            continue
        sub = Reader(body)
        setattr(obj, known[0], known[1](sub))
        if sub.remaining:
            raise DecodeError(f"tagged field {known[0]}: {sub.remaining} unread bytes")
    return unknown


def _write_tags(w: Writer, obj, tagged: dict, tag_order: list) -> None:
    present: list[tuple[int, bytes]] = []
    for tag in tag_order:
        name, _, write, default = tagged[tag]
        value = getattr(obj, name)
        if _same(value, default):
            continue
        sub = Writer()
        write(sub, value)
        present.append((tag, sub.getvalue()))
    if obj.unknown_tags:
        for tag in obj.unknown_tags:
            if tag in tagged:
                raise EncodeError(f"unknown tag {tag} is {tagged[tag][0]}'s tag in this version")
        present.extend(obj.unknown_tags.items())
        present.sort(key=lambda item: item[0])
    w.uvarint(len(present))
    for tag, data in present:
        w.uvarint(tag)
        w.uvarint(len(data))
        w.raw(data)


_SCALAR_READ = {
    "int8": Reader.int8, "int16": Reader.int16, "int32": Reader.int32, "int64": Reader.int64,
    "uint16": Reader.uint16, "uint32": Reader.uint32, "float64": Reader.float64,
    "bool": Reader.bool, "uuid": Reader.uuid,
}
_SCALAR_WRITE = {
    "int8": Writer.int8, "int16": Writer.int16, "int32": Writer.int32, "int64": Writer.int64,
    "uint16": Writer.uint16, "uint32": Writer.uint32, "float64": Writer.float64,
    "bool": Writer.bool, "uuid": Writer.uuid,
}


def _compile_field(schema: _Schema, f: F, version: int, flexible: bool) -> tuple[Callable, Callable]:
    nullable = version in f.nullable
    if f.is_array:
        read_elem, write_elem = _compile_element(schema, f, version, flexible, False)
        read_items = _fixed_width_items(f.element_type) if f.element_type in _FIXED else \
            (lambda r, n: [read_elem(r) for _ in range(n)])

        def read_array(r: Reader):
            n = r.array_length(flexible, nullable)
            if n is None:
                return None
            return read_items(r, n)

        def write_array(w: Writer, items) -> None:
            if items is None:
                w.array_length(None, flexible, nullable)
                return
            w.array_length(len(items), flexible, nullable)
            for item in items:
                write_elem(w, item)

        return read_array, write_array
    return _compile_element(schema, f, version, flexible, nullable)


def _fixed_width_items(kind: str) -> Callable:
    """read_items(reader, n) for n fixed-width numbers: one struct call, not n."""
    code = _FIXED[kind]
    width = struct.calcsize(">" + code)
    return lambda r, n: list(struct.unpack_from(f">{n}{code}", r.buf, r._advance(n * width)))


def _compile_element(schema: _Schema, f: F, version: int, flexible: bool,
                     nullable: bool) -> tuple[Callable, Callable]:
    kind = f.element_type
    if f.fields:
        read_struct, write_struct = _compile_struct(schema, f, version, flexible)
        cls = schema.struct_classes[kind]
        if not nullable:
            def write_checked(w: Writer, obj) -> None:
                if not isinstance(obj, cls):
                    if type(obj) is Encoded and obj.cls is cls and obj.version == version \
                            and obj.flexible == flexible:
                        w.raw(obj.data)
                        return
                    got = repr(obj) if type(obj) is Encoded else type(obj).__name__
                    raise EncodeError(f"{f.name} v{version}: expected {kind}, got {got}")
                write_struct(w, obj)
            return read_struct, write_checked

        def read_nullable(r: Reader):
            marker = r.int8()
            if marker == -1:
                return None
            if marker != 1:
                raise DecodeError(f"{f.name}: invalid null marker {marker}")
            return read_struct(r)

        def write_nullable(w: Writer, obj) -> None:
            if obj is None:
                w.int8(-1)
            else:
                w.int8(1)
                write_struct(w, obj)
        return read_nullable, write_nullable
    if kind in _SCALAR_READ:
        read, write = _SCALAR_READ[kind], _SCALAR_WRITE[kind]
        if kind == "uuid":
            def write_uuid(w: Writer, v) -> None:
                write(w, v if isinstance(v, uuid.UUID) else uuid.UUID(bytes=bytes(v)))
            return read, write_uuid
        return read, write
    if kind == "string":
        return (lambda r: r.string(flexible, nullable),
                lambda w, v: w.string(v, flexible, nullable))
    # bytes and records: views into the input on decode, uncopied chunks on encode
    return (lambda r: r.bytes(flexible, nullable),
            lambda w, v: w.bytes(v, flexible, nullable))

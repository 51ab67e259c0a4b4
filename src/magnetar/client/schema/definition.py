"""Typed records as the official client declares them (`pulsar.schema.Record` and its fields).

A `Record` subclass lists its fields as class attributes; `schema()` is the Avro definition
AVRO and JSON schemas register. That definition must equal the official client's for the
same class (a Pulsar broker compares a hash of the definition's bytes to find a schema's
version), so the layout follows it: every field nullable (`["null", type]`) unless
`required=True`, a `default` key only with `required_default=True`, fields in declaration
order unless `_sorted_fields`, a `namespace` key when `_avro_namespace` is set, and a
record or enum named again by reference once it is defined.

Values are checked when set: a record never holds a value its definition cannot encode,
so a wrong type fails where it is assigned, with the field's name.
"""

from __future__ import annotations

import copy
import enum
from typing import Any, ClassVar


def _named(kind: Any) -> str:
    return getattr(kind, "__name__", str(kind))


class Field:
    """A record field: its Avro type, Python type, default and nullability."""

    avro_type: ClassVar[str] = ""
    python_types: ClassVar[tuple[type, ...]] = ()
    implicit_default: ClassVar[Any] = None

    def __init__(self, default: Any = None, required: bool = False, required_default: bool = False) -> None:
        self._required = required
        self._required_default = required_default
        self._default = None if default is None else self.validate_type("default", default)

    def type(self) -> str:
        return self.avro_type

    def python_type(self) -> Any:
        return self.python_types

    def default(self) -> Any:
        return self.implicit_default if self._default is None else self._default

    def required_default(self) -> bool:
        return self._required_default

    def schema(self) -> Any:
        return self.schema_info(set())

    def schema_info(self, defined_names: set[str]) -> Any:
        return self.avro_type

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None and not self._required:
            return self.default()
        if not isinstance(val, self.python_types):
            raise TypeError(f"Invalid type '{type(val)}' for field '{name}'. Expected: "
                            f"{', '.join(_named(t) for t in self.python_types)}")
        return val


class Null(Field):
    avro_type = "null"
    python_types = (type(None),)

    def validate_type(self, name: str, val: Any) -> Any:
        if val is not None:
            raise TypeError(f"Field '{name}' is of type null and holds only None")
        return val


class Boolean(Field):
    avro_type = "boolean"
    python_types = (bool,)
    implicit_default = False


class Integer(Field):
    avro_type = "int"
    python_types = (int,)


class Long(Field):
    avro_type = "long"
    python_types = (int,)


class Float(Field):
    avro_type = "float"
    python_types = (float, int)


class Double(Field):
    avro_type = "double"
    python_types = (float, int)


class _Text(Field):
    """Bytes and String take either form (UTF-8) and hold the first of their `python_types`."""

    def validate_type(self, name: str, val: Any) -> Any:
        val = super().validate_type(name, val)
        if isinstance(val, str) and self.python_types[0] is bytes:
            return val.encode()
        if isinstance(val, bytes) and self.python_types[0] is str:
            return val.decode()
        return val


class Bytes(_Text):
    avro_type = "bytes"
    python_types = (bytes, str)


class String(_Text):
    avro_type = "string"
    python_types = (str, bytes)


class CustomEnum(Field):
    """A field of a Python `enum.Enum`: Avro's enum of its member names."""

    avro_type = "enum"

    def __init__(self, enum_type: type[enum.Enum], default: Any = None, required: bool = False,
                 required_default: bool = False) -> None:
        if not (isinstance(enum_type, type) and issubclass(enum_type, enum.Enum)):
            raise TypeError(f"{_named(enum_type)} is not an Enum type")
        self.enum_type = enum_type
        self.values = {member.value: member for member in enum_type}
        super().__init__(default, required, required_default)

    def python_type(self) -> Any:
        return self.enum_type

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None or isinstance(val, self.enum_type):
            return val
        if type(val) is str and val in self.enum_type.__members__:
            return self.enum_type[val]
        if type(val) is int and val in self.values:
            return self.values[val]
        raise TypeError(f"Invalid enum value '{val}' for field '{name}'. Expected one of "
                        f"{list(self.enum_type.__members__)}")

    def schema_info(self, defined_names: set[str]) -> Any:
        name = self.enum_type.__name__
        if name in defined_names:
            return name
        defined_names.add(name)
        return {"type": "enum", "name": name, "symbols": [member.name for member in self.enum_type]}


class _Container(Field):
    """Array and Map: a field holding items of another field's or record's type."""

    item_key: ClassVar[str]
    """The key naming the item type in the Avro definition."""

    def __init__(self, item_type: Any, default: Any = None, required: bool = False,
                 required_default: bool = False) -> None:
        if not isinstance(item_type, (Field, Record)):
            raise TypeError(f"Argument {_named(item_type)} is not a Record or a Field")
        self._item = item_type
        super().__init__(default=default, required=required, required_default=required_default)

    def _items(self, name: str, val: Any) -> Any:
        raise NotImplementedError

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None:
            return None
        super().validate_type(name, val)
        expected = self._item.python_type()
        for item in self._items(name, val):
            if not isinstance(item, expected):
                raise TypeError(f"{self.avro_type.capitalize()} field '{name}' holds a {type(item).__name__}, "
                                f"expected {self._item.type()}")
        return val

    def schema_info(self, defined_names: set[str]) -> Any:
        item = self._item.schema_info(defined_names) if isinstance(self._item, (Array, Map, Record)) \
            else self._item.type()
        return {"type": self.avro_type, self.item_key: item}


class Array(_Container):
    avro_type = "array"
    python_types = (list,)
    item_key = "items"

    @property
    def array_type(self) -> Any:
        return self._item

    def _items(self, name: str, val: Any) -> Any:
        return val


class Map(_Container):
    avro_type = "map"
    python_types = (dict,)
    item_key = "values"

    @property
    def value_type(self) -> Any:
        return self._item

    def _items(self, name: str, val: Any) -> Any:
        for key in val:
            if not isinstance(key, str):
                raise TypeError(f"Map field '{name}' has a key of type {type(key).__name__}: keys are strings")
        return val.values()


class _RecordMeta(type):
    """Collects a Record subclass's fields, in declaration order (enums and record classes as fields)."""

    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> _RecordMeta:
        if bases:
            namespace["_fields"] = _fields_of(namespace)
            namespace["_required"] = False
        return super().__new__(mcs, name, bases, namespace)


def _fields_of(namespace: dict[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for name, declared in namespace.items():
        field = declared
        if isinstance(declared, type) and issubclass(declared, enum.Enum):
            field = CustomEnum(declared)
        elif isinstance(declared, _RecordMeta):
            field = declared()  # a record class as a field means a sub-record of that class
        if isinstance(field, (Field, Record)):
            fields[name] = field
    return fields


_RESERVED = frozenset({"_default", "_required", "_required_default"})


class Record(metaclass=_RecordMeta):
    """A typed record; subclass it and declare fields as class attributes."""

    _avro_namespace: ClassVar[str | None] = None
    _sorted_fields: ClassVar[bool] = False
    _fields: ClassVar[dict[str, Any]] = {}

    def __init__(self, default: Any = None, required_default: bool = False, required: bool = False,
                 *args: Any, **kwargs: Any) -> None:
        self._default = default
        self._required_default = required_default
        self._required = required
        for name, field in self._fields.items():
            if name in kwargs:
                setattr(self, name, _from_plain(field, kwargs[name]))
            elif isinstance(field, Record):
                setattr(self, name, field)
            else:
                object.__setattr__(self, name, field.default())  # defaults are not checked again

    def __setattr__(self, key: str, value: Any) -> None:
        if key not in _RESERVED:
            field = self._fields.get(key)
            if field is None:
                raise AttributeError(f"Cannot set undeclared field {key} on record {type(self).__name__}")
            value = field.validate_type(key, value)
        object.__setattr__(self, key, value)

    @classmethod
    def schema(cls) -> dict[str, Any]:
        """The Avro definition (a dict) AVRO and JSON schemas of this class register."""
        return cls.schema_info(set())

    @classmethod
    def schema_info(cls, defined_names: set[str]) -> Any:
        full_name = f"{cls._avro_namespace}.{cls.__name__}" if cls._avro_namespace is not None else cls.__name__
        if full_name in defined_names:
            return full_name
        defined_names.add(full_name)
        schema: dict[str, Any] = {"type": "record", "name": cls.__name__}
        if cls._avro_namespace is not None:
            schema["namespace"] = cls._avro_namespace
        names = sorted(cls._fields) if cls._sorted_fields else list(cls._fields)
        schema["fields"] = [_field_schema(name, cls._fields[name], defined_names) for name in names]
        return schema

    def fields(self) -> dict[str, Any]:
        """The field values, by name (what encoders walk)."""
        return {name: getattr(self, name) for name in self._fields}

    def __eq__(self, other: object) -> bool:
        return all(getattr(self, name) == getattr(other, name, object()) for name in self._fields)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]

    def __str__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in self.fields().items())
        return f"{type(self).__name__}({shown})"

    __repr__ = __str__

    def type(self) -> str:
        return type(self).__name__

    def python_type(self) -> type:
        return type(self)

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None and not self._required:
            return self.default()
        if not isinstance(val, type(self)):
            raise TypeError(f"Invalid type '{type(val)}' for sub-record field '{name}'. Expected: "
                            f"{type(self).__name__}")
        return val

    def default(self) -> Any:
        return self._default

    def required_default(self) -> bool:
        return self._required_default


def _field_schema(name: str, field: Any, defined_names: set[str]) -> dict[str, Any]:
    kind = field.schema_info(defined_names)
    entry: dict[str, Any] = {"name": name}
    if field.required_default():
        default = field.default()
        entry["default"] = default.name if isinstance(default, enum.Enum) else default
    entry["type"] = kind if field._required else ["null", kind]
    return entry


def _from_plain(field: Any, value: Any) -> Any:
    """A constructor argument as the field holds it: dicts become sub-records (also inside
    arrays and maps), as decoders hand them over."""
    if isinstance(field, Record) and isinstance(value, dict):
        return _record_of(field, value)
    if isinstance(field, Array) and isinstance(field.array_type, Record) and isinstance(value, list):
        return [_record_of(field.array_type, item) if isinstance(item, dict) else item for item in value]
    if isinstance(field, Map) and isinstance(field.value_type, Record) and isinstance(value, dict):
        return {key: _record_of(field.value_type, item) if isinstance(item, dict) else item
                for key, item in value.items()}
    return value


def _record_of(prototype: Record, values: dict[str, Any]) -> Record:
    record = copy.copy(prototype)
    record.__init__(**values)  # type: ignore[misc]
    return record

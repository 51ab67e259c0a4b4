"""Avro schema resolution as Pulsar's broker applies it.

Pulsar validates with Java Avro's resolving grammar, which matches records by their fields
and never by their names (a Python `Record` subclass renamed between versions still
evolves), while enums and fixed types must keep their names. The `avro` package's checker
compares record names too; this one leaves them out and keeps everything else.
Imported on first use (it loads `avro`).
"""

from __future__ import annotations

from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityResult, SchemaType
from avro.schema import RecordSchema, Schema


class PulsarCompatibilityChecker(ReaderWriterCompatibilityChecker):
    def calculate_compatibility(self, reader: Schema, writer: Schema, location: list[str]) -> SchemaCompatibilityResult:
        if reader.type == writer.type == SchemaType.RECORD:
            assert isinstance(reader, RecordSchema) and isinstance(writer, RecordSchema)
            return self.check_reader_writer_record_fields(reader, writer, location)
        return super().calculate_compatibility(reader, writer, location)

// Payloads decoded through a topic's schema, in the browser: Avro's binary encoding against
// the schema's definition, JSON and strings as text, Pulsar's primitive schemas, and
// protobuf by its wire format (field numbers as keys: the browser has no generated classes).
// A value is shown as JSON; whatever fails to decode is left to the text/hex view.

const UTF8 = new TextDecoder("utf-8", { fatal: true });
/** Values read at most from one payload: a hostile schema (an array of nulls a billion long
 * takes no bytes) stops here instead of holding the tab. */
const MAX_VALUES = 100_000;

class Reader {
  constructor(bytes) {
    this.bytes = bytes;
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.at = 0;
    this.values = 0;
  }
  need(count) {
    if (count < 0 || this.at + count > this.bytes.length) throw new Error("the payload is shorter than its schema says");
    const start = this.at;
    this.at += count;
    return start;
  }
  take(count) {
    const start = this.need(count);
    return this.bytes.subarray(start, start + count);
  }
  varint() {
    let value = 0n;
    for (let shift = 0n; shift < 70n; shift += 7n) {
      const byte = this.bytes[this.need(1)];
      value |= BigInt(byte & 0x7f) << shift;
      if ((byte & 0x80) === 0) return value;
    }
    throw new Error("a varint over 10 bytes");
  }
  /** Avro's int and long: zigzag varints; a Number while it is exact, else a string. */
  long() {
    const raw = this.varint();
    const value = (raw >> 1n) ^ -(raw & 1n);
    return value >= BigInt(Number.MIN_SAFE_INTEGER) && value <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(value) : String(value);
  }
  count() {
    const value = this.long();
    if (typeof value !== "number") throw new Error("a count past any payload's size");
    return value;
  }
}

function hexOf(bytes) {
  return Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("");
}

/** Arrays and maps come in blocks: a count (negative: followed by the block's size), zero ends them. */
function blocks(reader, item) {
  for (;;) {
    let count = reader.count();
    if (count === 0) return;
    if (count < 0) {
      count = -count;
      reader.count();
    }
    for (let i = 0; i < count; i++) item();
  }
}

function fullName(schema, space) {
  const name = schema.name ?? "";
  if (name.includes(".")) return name;
  const namespace = schema.namespace ?? space;
  return namespace ? `${namespace}.${name}` : name;
}

/** An Avro value of `schema` (parsed JSON) read from `reader`; `named` holds the named types seen so far. */
function avroValue(schema, reader, named, space = "") {
  if (++reader.values > MAX_VALUES) throw new Error(`more than ${MAX_VALUES} values`);
  if (typeof schema === "string") {
    switch (schema) {
      case "null": return null;
      case "boolean": return reader.bytes[reader.need(1)] !== 0;
      case "int": case "long": return reader.long();
      case "float": return reader.view.getFloat32(reader.need(4), true);
      case "double": return reader.view.getFloat64(reader.need(8), true);
      case "bytes": return hexOf(reader.take(reader.count()));
      case "string": return UTF8.decode(reader.take(reader.count()));
      default: {
        const type = named.get(schema) ?? named.get(space ? `${space}.${schema}` : schema);
        if (type === undefined) throw new Error(`the schema names an unknown type ${schema}`);
        return avroValue(type.schema, reader, named, type.space);
      }
    }
  }
  if (Array.isArray(schema)) {
    const branch = reader.count();
    if (branch < 0 || branch >= schema.length) throw new Error(`union branch ${branch} of ${schema.length}`);
    return avroValue(schema[branch], reader, named, space);
  }
  const name = schema.type === "record" || schema.type === "error" || schema.type === "enum" || schema.type === "fixed"
    ? fullName(schema, space) : null;
  const inner = name && name.includes(".") ? name.slice(0, name.lastIndexOf(".")) : space;
  if (name) named.set(name, { schema, space: inner });
  switch (schema.type) {
    case "record": case "error": {
      const value = {};
      for (const field of schema.fields ?? []) value[field.name] = avroValue(field.type, reader, named, inner);
      return value;
    }
    case "enum": {
      const index = reader.count();
      if (index < 0 || index >= schema.symbols.length) throw new Error(`enum index ${index} of ${schema.symbols.length}`);
      return schema.symbols[index];
    }
    case "fixed": return hexOf(reader.take(schema.size));
    case "array": {
      const items = [];
      blocks(reader, () => items.push(avroValue(schema.items, reader, named, space)));
      return items;
    }
    case "map": {
      const entries = {};
      blocks(reader, () => {
        const key = UTF8.decode(reader.take(reader.count()));
        entries[key] = avroValue(schema.values, reader, named, space);
      });
      return entries;
    }
    default: return avroValue(schema.type, reader, named, space); // {"type": "int", "logicalType": ...}
  }
}

export function avroDecode(definition, bytes) {
  const reader = new Reader(bytes);
  const value = avroValue(JSON.parse(definition), reader, new Map());
  if (reader.at !== bytes.length) throw new Error(`${bytes.length - reader.at} bytes past the schema's value`);
  return value;
}

/** Protobuf's wire format: {field number: value or [values]}; nested messages stay bytes (hex). */
export function protobufFields(bytes) {
  const reader = new Reader(bytes);
  const fields = {};
  while (reader.at < bytes.length) {
    const tag = reader.varint();
    const number = String(tag >> 3n);
    if (number === "0") throw new Error("field number 0");
    let value;
    switch (Number(tag & 7n)) {
      case 0: value = String(reader.varint()); break;
      case 1: value = hexOf(reader.take(8)); break;
      case 2: {
        const data = reader.take(reader.count());
        try {
          value = UTF8.decode(data);
        } catch {
          value = hexOf(data);
        }
        break;
      }
      case 5: value = hexOf(reader.take(4)); break;
      default: throw new Error("not protobuf: wire type 3, 4, 6 or 7");
    }
    fields[number] = number in fields ? [].concat(fields[number], value) : value;
  }
  return fields;
}

const PRIMITIVES = {
  INT8: [1, (view) => view.getInt8(0)],
  INT16: [2, (view) => view.getInt16(0)],
  INT32: [4, (view) => view.getInt32(0)],
  INT64: [8, (view) => String(view.getBigInt64(0))],
  FLOAT: [4, (view) => view.getFloat32(0)],
  DOUBLE: [8, (view) => view.getFloat64(0)],
  BOOLEAN: [1, (view) => view.getUint8(0) !== 0],
  TIMESTAMP: [8, (view) => new Date(Number(view.getBigInt64(0))).toISOString()],
};

/** The payload through one schema version as text, or throws when it is not of that schema. */
export function decodeWith(schema, bytes) {
  const type = schema.type;
  if (type === "AVRO") return JSON.stringify(avroDecode(schema.data, bytes), null, 2);
  if (type === "JSON") return JSON.stringify(JSON.parse(UTF8.decode(bytes)), null, 2);
  if (type === "STRING") return UTF8.decode(bytes);
  if (type === "PROTOBUF" || type === "PROTOBUF_NATIVE") return JSON.stringify(protobufFields(bytes), null, 2);
  if (type in PRIMITIVES) {
    const [size, read] = PRIMITIVES[type];
    if (bytes.length !== size) throw new Error(`${type} is ${size} bytes, the payload ${bytes.length}`);
    return JSON.stringify(read(new DataView(bytes.buffer, bytes.byteOffset, size)));
  }
  throw new Error(`${type} payloads are shown as they are`);
}

/** The payload decoded through the newest version it fits: {text, version} or null. */
export function decode(versions, bytes) {
  for (const schema of versions) {
    try {
      return { text: decodeWith(schema, bytes), version: schema.version, type: schema.type };
    } catch {
      // an older version may have written it
    }
  }
  return null;
}

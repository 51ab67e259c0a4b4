// Pulsar's batch layout, read in the browser: the admin API answers a batched entry as it is
// stored (X-Pulsar-num-batch-message says how many), each message a 4-byte big-endian size,
// its SingleMessageMetadata (protobuf) and its payload. Pulsar's admin client splits it the
// same way on its side.

const UTF8 = new TextDecoder("utf-8", { fatal: false });

class Reader {
  constructor(bytes, start = 0, end = bytes.length) {
    this.bytes = bytes;
    this.at = start;
    this.end = end;
  }
  varint() {
    // protobuf varints up to 64 bits: numbers past 2^53 lose precision, which no time or id here reaches
    let value = 0;
    let scale = 1;
    for (let i = 0; i < 10; i++) {
      if (this.at >= this.end) throw new Error("batch metadata cut short");
      const byte = this.bytes[this.at++];
      value += (byte & 0x7f) * scale;
      if ((byte & 0x80) === 0) return value;
      scale *= 128;
    }
    throw new Error("batch metadata has a varint over 10 bytes");
  }
  slice(length) {
    if (length < 0 || this.at + length > this.end) throw new Error("batch metadata cut short");
    const part = this.bytes.subarray(this.at, this.at + length);
    this.at += length;
    return part;
  }
  skip(wireType) {
    if (wireType === 0) this.varint();
    else if (wireType === 1) this.slice(8);
    else if (wireType === 2) this.slice(this.varint());
    else if (wireType === 5) this.slice(4);
    else throw new Error(`batch metadata has wire type ${wireType}`);
  }
}

function keyValue(bytes) {
  const reader = new Reader(bytes);
  let key = "";
  let value = "";
  while (reader.at < reader.end) {
    const tag = reader.varint();
    if (tag === (1 << 3 | 2)) key = UTF8.decode(reader.slice(reader.varint()));
    else if (tag === (2 << 3 | 2)) value = UTF8.decode(reader.slice(reader.varint()));
    else reader.skip(tag & 7);
  }
  return [key, value];
}

function singleMetadata(bytes) {
  const reader = new Reader(bytes);
  const message = { properties: [], key: null, payloadSize: 0, eventTime: 0, sequenceId: null, nullValue: false };
  while (reader.at < reader.end) {
    const tag = reader.varint();
    const field = Math.floor(tag / 8);
    const wireType = tag & 7;
    if (field === 1 && wireType === 2) message.properties.push(keyValue(reader.slice(reader.varint())));
    else if (field === 2 && wireType === 2) message.key = UTF8.decode(reader.slice(reader.varint()));
    else if (field === 3 && wireType === 0) message.payloadSize = reader.varint();
    else if (field === 5 && wireType === 0) message.eventTime = reader.varint();
    else if (field === 8 && wireType === 0) message.sequenceId = reader.varint();
    else if (field === 9 && wireType === 0) message.nullValue = reader.varint() !== 0;
    else reader.skip(wireType);
  }
  return message;
}

/** The messages of a batch payload: [{properties: [[k, v]], key, eventTime, sequenceId, payload}]. */
export function splitBatch(bytes, count) {
  const messages = [];
  let at = 0;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let i = 0; i < count; i++) {
    if (at + 4 > bytes.length) throw new Error(`the batch ends after ${i} of ${count} messages`);
    const size = view.getUint32(at);
    at += 4;
    if (at + size > bytes.length) throw new Error("batch metadata cut short");
    const message = singleMetadata(bytes.subarray(at, at + size));
    at += size;
    if (message.payloadSize < 0 || at + message.payloadSize > bytes.length) throw new Error("batch payload cut short");
    message.payload = bytes.subarray(at, at + message.payloadSize);
    at += message.payloadSize;
    messages.push(message);
  }
  return messages;
}

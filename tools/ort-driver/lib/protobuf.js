'use strict';
// Minimal protobuf wire-format reader/writer: just what TensorProto, SequenceProto,
// OptionalProto and a ModelProto summary need. Avoids a protobufjs dependency.

const WIRE = { VARINT: 0, I64: 1, LEN: 2, I32: 5 };

class Reader {
  constructor(bytes, start = 0, end = bytes.length) {
    this.buf = bytes;
    this.pos = start;
    this.end = end;
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  eof() {
    return this.pos >= this.end;
  }

  // Varint as a BigInt, sign-interpreted as int64 (negative int32/int64 use 10 bytes).
  varintBig() {
    let result = 0n;
    let shift = 0n;
    for (;;) {
      if (this.pos >= this.end) throw new Error('protobuf: truncated varint');
      const b = this.buf[this.pos++];
      result |= BigInt(b & 0x7f) << shift;
      if (b < 0x80) break;
      shift += 7n;
      if (shift > 63n) throw new Error('protobuf: varint too long');
    }
    return BigInt.asIntN(64, result);
  }

  // Varint as a Number. Fast path for the common small case; exact for |v| < 2^53.
  varint() {
    const start = this.pos;
    let result = 0;
    let mul = 1;
    for (let i = 0; i < 7; i++) {
      if (this.pos >= this.end) throw new Error('protobuf: truncated varint');
      const b = this.buf[this.pos++];
      result += (b & 0x7f) * mul;
      if (b < 0x80) return result;
      mul *= 128;
    }
    this.pos = start;
    return Number(this.varintBig());
  }

  uvarintBig() {
    return BigInt.asUintN(64, this.varintBig());
  }

  tag() {
    const t = this.varint();
    return { field: Math.floor(t / 8), wire: t & 7 };
  }

  bytes() {
    const len = this.varint();
    if (this.pos + len > this.end) throw new Error('protobuf: truncated length-delimited field');
    const out = this.buf.subarray(this.pos, this.pos + len);
    this.pos += len;
    return out;
  }

  string() {
    return Buffer.from(this.bytes()).toString('utf8');
  }

  float() {
    const v = this.view.getFloat32(this.pos, true);
    this.pos += 4;
    return v;
  }

  double() {
    const v = this.view.getFloat64(this.pos, true);
    this.pos += 8;
    return v;
  }

  skip(wire) {
    switch (wire) {
      case WIRE.VARINT: this.varintBig(); break;
      case WIRE.I64: this.pos += 8; break;
      case WIRE.LEN: this.bytes(); break;
      case WIRE.I32: this.pos += 4; break;
      default: throw new Error(`protobuf: unsupported wire type ${wire}`);
    }
    if (this.pos > this.end) throw new Error('protobuf: truncated field');
  }

  // Reads a repeated scalar field that may be packed (LEN) or unpacked (one value per tag).
  repeated(wire, readOne, out) {
    if (wire === WIRE.LEN) {
      const len = this.varint();
      const stop = this.pos + len;
      if (stop > this.end) throw new Error('protobuf: truncated packed field');
      while (this.pos < stop) out.push(readOne.call(this));
    } else {
      out.push(readOne.call(this));
    }
    return out;
  }
}

// Iterates over the fields of a message: fn(field, wire, reader) must consume the value.
function forEachField(bytes, fn) {
  const r = bytes instanceof Reader ? bytes : new Reader(bytes);
  while (!r.eof()) {
    const { field, wire } = r.tag();
    const before = r.pos;
    fn(field, wire, r);
    if (r.pos === before) r.skip(wire); // handler ignored the field
  }
}

class Writer {
  constructor() {
    this.chunks = [];
    this.cur = Buffer.allocUnsafe(256);
    this.len = 0;
  }

  ensure(n) {
    if (this.len + n <= this.cur.length) return;
    this.chunks.push(this.cur.subarray(0, this.len));
    this.cur = Buffer.allocUnsafe(Math.max(256, n));
    this.len = 0;
  }

  rawBytes(b) {
    if (b.length > 1024) {
      // Large payloads (raw_data) are appended without copying into the scratch buffer.
      this.chunks.push(this.cur.subarray(0, this.len));
      this.chunks.push(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
      this.cur = Buffer.allocUnsafe(256);
      this.len = 0;
      return this;
    }
    this.ensure(b.length);
    this.cur.set(b, this.len);
    this.len += b.length;
    return this;
  }

  varint(v) {
    let x = BigInt.asUintN(64, BigInt(v));
    this.ensure(10);
    while (x >= 0x80n) {
      this.cur[this.len++] = Number(x & 0x7fn) | 0x80;
      x >>= 7n;
    }
    this.cur[this.len++] = Number(x);
    return this;
  }

  tag(field, wire) {
    return this.varint(field * 8 + wire);
  }

  // Field helpers (all write tag + value).
  int(field, v) { return this.tag(field, WIRE.VARINT).varint(v); }
  bytes(field, b) { return this.tag(field, WIRE.LEN).varint(b.length).rawBytes(b); }
  string(field, s) { return this.bytes(field, Buffer.from(s, 'utf8')); }
  message(field, w) { return this.bytes(field, w.finish()); }
  float(field, v) {
    this.tag(field, WIRE.I32).ensure(4);
    this.cur.writeFloatLE(v, this.len);
    this.len += 4;
    return this;
  }

  // Packed repeated scalars: kind is 'varint' | 'float' | 'double'.
  packed(field, values, kind) {
    const inner = new Writer();
    for (const v of values) {
      if (kind === 'varint') inner.varint(v);
      else if (kind === 'float') { inner.ensure(4); inner.cur.writeFloatLE(v, inner.len); inner.len += 4; }
      else { inner.ensure(8); inner.cur.writeDoubleLE(v, inner.len); inner.len += 8; }
    }
    return this.bytes(field, inner.finish());
  }

  // Unpacked repeated scalars: one tag per value (legal protobuf, used to test decoders).
  unpacked(field, values, kind) {
    for (const v of values) {
      if (kind === 'varint') this.int(field, v);
      else if (kind === 'float') this.float(field, v);
      else {
        this.tag(field, WIRE.I64).ensure(8);
        this.cur.writeDoubleLE(v, this.len);
        this.len += 8;
      }
    }
    return this;
  }

  finish() {
    return Buffer.concat([...this.chunks, this.cur.subarray(0, this.len)]);
  }
}

module.exports = { Reader, Writer, WIRE, forEachField };

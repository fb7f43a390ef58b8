// A minimal GGUF v3 writer for test files the fixtures don't cover (an unsupported
// architecture, say). Layout, from the GGUF spec (ggml's docs/gguf.md):
//
//   u32 magic "GGUF" | u32 version = 3 | u64 tensor_count | u64 kv_count
//   kv:     string key | u32 value_type | value          (string = u64 length + UTF-8 bytes)
//   tensor: string name | u32 n_dims | u64 dims[n_dims] | u32 ggml_type | u64 offset
//   padding to general.alignment (32 by default), then the tensor data, each tensor at its
//   offset (relative to the data start, a multiple of the alignment).
import fs from 'node:fs';

export const T = { U8: 0, I8: 1, U16: 2, I16: 3, U32: 4, I32: 5, F32: 6, BOOL: 7, STRING: 8, ARRAY: 9, U64: 10, I64: 11, F64: 12 };
const GGML_F32 = 0;
const ALIGN = 32;

class Writer {
  constructor() {
    this.parts = [];
    this.length = 0;
  }
  bytes(b) {
    this.parts.push(Buffer.from(b.buffer ? new Uint8Array(b.buffer, b.byteOffset, b.byteLength) : b));
    this.length += b.byteLength ?? b.length;
  }
  u32(v) {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(v);
    this.bytes(b);
  }
  u64(v) {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(v));
    this.bytes(b);
  }
  str(s) {
    const b = Buffer.from(s, 'utf8');
    this.u64(b.length);
    this.bytes(b);
  }
  pad(align) {
    const n = (align - (this.length % align)) % align;
    if (n) this.bytes(Buffer.alloc(n));
  }
  value(type, v) {
    switch (type) {
      case T.STRING: return this.str(v);
      case T.U32: return this.u32(v);
      case T.U64: return this.u64(v);
      case T.F32: {
        const b = Buffer.alloc(4);
        b.writeFloatLE(v);
        return this.bytes(b);
      }
      case T.BOOL: return this.bytes(Buffer.from([v ? 1 : 0]));
      default: throw new Error(`gguf.mjs: value type ${type} not supported by this small writer`);
    }
  }
  buffer() {
    return Buffer.concat(this.parts);
  }
}

/**
 * kv: [[key, type, value], …]; tensors: [{name, dims: [n0, n1, …], data: Float32Array}].
 * Returns the file as a Buffer.
 */
export function buildGguf({ kv, tensors }) {
  const w = new Writer();
  w.bytes(Buffer.from('GGUF', 'ascii'));
  w.u32(3);
  w.u64(tensors.length);
  w.u64(kv.length);
  for (const [key, type, value] of kv) {
    w.str(key);
    w.u32(type);
    w.value(type, value);
  }
  let offset = 0;
  const placed = [];
  for (const t of tensors) {
    const n = t.dims.reduce((a, b) => a * b, 1);
    if (t.data.length !== n) throw new Error(`tensor ${t.name}: ${t.data.length} values for dims ${t.dims}`);
    w.str(t.name);
    w.u32(t.dims.length);
    for (const d of t.dims) w.u64(d);
    w.u32(GGML_F32);
    w.u64(offset);
    placed.push([offset, t.data]);
    offset += Math.ceil(t.data.byteLength / ALIGN) * ALIGN;
  }
  w.pad(ALIGN);
  const dataStart = w.length;
  for (const [off, data] of placed) {
    if (w.length - dataStart < off) w.bytes(Buffer.alloc(off - (w.length - dataStart)));
    w.bytes(data);
  }
  w.pad(ALIGN);
  return w.buffer();
}

/** A small but well-formed GGUF whose architecture coco doesn't support: Mamba. */
export function mambaGguf() {
  const dim = 64;
  const vocab = 32;
  return buildGguf({
    kv: [
      ['general.architecture', T.STRING, 'mamba'],
      ['general.name', T.STRING, 'coco e2e mamba stub'],
      ['mamba.context_length', T.U32, 1024],
      ['mamba.embedding_length', T.U32, dim],
      ['mamba.block_count', T.U32, 1],
      ['mamba.ssm.conv_kernel', T.U32, 4],
      ['mamba.ssm.inner_size', T.U32, 2 * dim],
      ['mamba.ssm.state_size', T.U32, 16],
      ['mamba.ssm.time_step_rank', T.U32, 4],
      ['mamba.attention.layer_norm_rms_epsilon', T.F32, 1e-5],
    ],
    tensors: [{ name: 'token_embd.weight', dims: [dim, vocab], data: new Float32Array(dim * vocab).map((_, i) => Math.sin(i) * 0.02) }],
  });
}

export function writeFile(file, buf) {
  fs.writeFileSync(file, buf);
  return file;
}

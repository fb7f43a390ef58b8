// GGUF files that declare far more weight data than they hold: a real header (a valid llama
// config with a SentencePiece vocabulary, so the only thing wrong is the size) followed by a
// sparse data section. The file's length is the header's data end, so Content-Length and
// Range answers are those of a real multi-GB model, but the zeros take no disk and the test
// server streams them only if someone asks. Used by gpu_limits.test.mjs.
//
// Layout (GGUF v3, ggml's docs/gguf.md): magic "GGUF", u32 version, u64 tensor count,
// u64 kv count; each kv: string key, u32 type, value (arrays: u32 element type, u64 count,
// elements); each tensor info: string name, u32 n_dims, u64 dims…, u32 ggml type, u64 offset
// (relative to the data start, aligned); padding to the alignment; data.
import fs from 'node:fs';

const TYPE = { U32: 4, I32: 5, F32: 6, STRING: 8, ARRAY: 9 };
const GGML_F32 = 0;
const ALIGN = 32;

class Out {
  constructor() {
    this.parts = [];
    this.length = 0;
  }
  raw(buf) {
    this.parts.push(buf);
    this.length += buf.length;
  }
  u32(v) {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(v);
    this.raw(b);
  }
  i32(v) {
    const b = Buffer.alloc(4);
    b.writeInt32LE(v);
    this.raw(b);
  }
  f32(v) {
    const b = Buffer.alloc(4);
    b.writeFloatLE(v);
    this.raw(b);
  }
  u64(v) {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(v));
    this.raw(b);
  }
  str(s) {
    const b = Buffer.from(s, 'utf8');
    this.u64(b.length);
    this.raw(b);
  }
  // One value of `type`; arrays are {array: elementType, values: […]}.
  value(type, v) {
    switch (type) {
      case TYPE.U32: return this.u32(v);
      case TYPE.I32: return this.i32(v);
      case TYPE.F32: return this.f32(v);
      case TYPE.STRING: return this.str(v);
      case TYPE.ARRAY:
        this.u32(v.array);
        this.u64(v.values.length);
        for (const x of v.values) this.value(v.array, x);
        return;
      default: throw new Error(`big_gguf.mjs: value type ${type}`);
    }
  }
}

/**
 * A llama model's header: `dim`, `heads`, `ffn` as given, one layer, F32 tensors, a
 * 260-piece SentencePiece vocabulary, plus `extra` tensors ({name, dims}, F32) the config
 * doesn't read. Returns {header: Buffer, dataEnd, tensors: [{name, dims, bytes}]}.
 */
export function llamaHeader({ dim, heads, ffn, name = 'coco e2e oversized llama', extra = [] }) {
  const pieces = ['<unk>', '<s>', '</s>', ...Array.from({ length: 256 }, (_, b) => `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`), '▁'];
  const types = [2, 3, 3, ...Array(256).fill(6), 1];
  const kv = [
    ['general.architecture', TYPE.STRING, 'llama'],
    ['general.name', TYPE.STRING, name],
    ['llama.block_count', TYPE.U32, 1],
    ['llama.context_length', TYPE.U32, 2048],
    ['llama.embedding_length', TYPE.U32, dim],
    ['llama.feed_forward_length', TYPE.U32, ffn],
    ['llama.attention.head_count', TYPE.U32, heads],
    ['llama.attention.head_count_kv', TYPE.U32, heads],
    ['llama.attention.layer_norm_rms_epsilon', TYPE.F32, 1e-5],
    ['tokenizer.ggml.model', TYPE.STRING, 'llama'],
    ['tokenizer.ggml.tokens', TYPE.ARRAY, { array: TYPE.STRING, values: pieces }],
    ['tokenizer.ggml.scores', TYPE.ARRAY, { array: TYPE.F32, values: pieces.map((_, i) => -i) }],
    ['tokenizer.ggml.token_type', TYPE.ARRAY, { array: TYPE.I32, values: types }],
    ['tokenizer.ggml.bos_token_id', TYPE.U32, 1],
    ['tokenizer.ggml.eos_token_id', TYPE.U32, 2],
  ];
  const vocab = pieces.length;
  const tensors = [
    { name: 'token_embd.weight', dims: [dim, vocab] },
    { name: 'output_norm.weight', dims: [dim] },
    { name: 'blk.0.attn_norm.weight', dims: [dim] },
    { name: 'blk.0.attn_q.weight', dims: [dim, dim] },
    { name: 'blk.0.attn_k.weight', dims: [dim, dim] },
    { name: 'blk.0.attn_v.weight', dims: [dim, dim] },
    { name: 'blk.0.attn_output.weight', dims: [dim, dim] },
    { name: 'blk.0.ffn_norm.weight', dims: [dim] },
    { name: 'blk.0.ffn_gate.weight', dims: [dim, ffn] },
    { name: 'blk.0.ffn_up.weight', dims: [dim, ffn] },
    { name: 'blk.0.ffn_down.weight', dims: [ffn, dim] },
    ...extra,
  ];
  const out = new Out();
  out.raw(Buffer.from('GGUF', 'ascii'));
  out.u32(3);
  out.u64(tensors.length);
  out.u64(kv.length);
  for (const [key, type, v] of kv) {
    out.str(key);
    out.u32(type);
    out.value(type, v);
  }
  let offset = 0;
  for (const t of tensors) {
    t.bytes = t.dims.reduce((a, b) => a * b, 1) * 4;
    out.str(t.name);
    out.u32(t.dims.length);
    for (const d of t.dims) out.u64(d);
    out.u32(GGML_F32);
    out.u64(offset);
    offset += Math.ceil(t.bytes / ALIGN) * ALIGN;
  }
  out.raw(Buffer.alloc((ALIGN - (out.length % ALIGN)) % ALIGN));
  return { header: Buffer.concat(out.parts), dataEnd: out.length + offset, tensors };
}

/** Writes the header and extends the file with a hole to `dataEnd` bytes (no disk used). */
export function writeSparse(file, { header, dataEnd }) {
  fs.writeFileSync(file, header);
  fs.truncateSync(file, dataEnd);
  return file;
}

export const MiB = 1 << 20;
/** The capability report's number format (src/capabilities.rs `mib`). */
export function mib(bytes) {
  return `${(bytes / MiB).toFixed(1)} MiB`;
}

#!/usr/bin/env node
// coco's static server: the page (Trunk's dist/) at /, the models at /models/ and, for the
// tests, a fixtures folder at /fixtures/. Node 20, no dependencies.
//
//   node scripts/serve.mjs [--port 8080] [--host 127.0.0.1] [--dist dist] [--models models]
//                          [--fixtures DIR] [--faults] [--cors-port N] [--quiet]
//
// Files are streamed from disk (the default model is 253 MB; it never sits in memory) with
// single-range Range support (206 / 416), HEAD, a strong ETag built from size + mtime and
// If-Range, because the page reads a GGUF's header with growing Range requests and resumes a
// broken download from where it stopped.
//
// --faults turns on a fault-injection router used only by tests/e2e:
//
//   /fault/<kind>/<param>[/<kind>/<param>…]/<real path>
//
//   drop/N       destroy the socket after N body bytes, every time
//   droponce/N   the same, but only for the first response to this URL that reaches N bytes;
//                later ones succeed (so the page's Range resume can be tested)
//   stall/N      send N body bytes, then hang until the client gives up
//   status/C     answer with status C (404, 500, …) and a short text body
//   badlen/N     announce a Content-Length N bytes larger than the body, send the body, close
//   norange/0    ignore Range and If-Range: always 200 with the whole file, no Accept-Ranges
//   slow/B       send at most B bytes per second (progress and cancel tests)
//   nocors/0     on the cross-origin listener, send no CORS headers
//
// and a second listener (--cors-port; port + 1 by default) that serves the same tree from
// another origin with `Access-Control-Allow-Origin: *`, as a model host such as Hugging Face
// does, except under `nocors`.
//
// Tests import createServer() and listen on port 0; the CLI below is for people.
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const MIME = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.wasm': 'application/wasm', // required by WebAssembly.instantiateStreaming
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.map': 'application/json; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.jpg': 'image/jpeg',
  '.ico': 'image/x-icon',
  '.webmanifest': 'application/manifest+json',
  '.txt': 'text/plain; charset=utf-8',
  '.md': 'text/markdown; charset=utf-8',
  '.gguf': 'application/octet-stream',
};

const FAULT_KINDS = new Set(['drop', 'droponce', 'stall', 'status', 'badlen', 'norange', 'slow', 'nocors']);

// Headers a cross-origin page must be able to read: the loader sizes its progress bar from
// Content-Length, resumes with Content-Range and checks the cache entry against the ETag.
const CORS_HEADERS = {
  'Access-Control-Allow-Origin': '*',
  'Access-Control-Expose-Headers': 'Content-Length, Content-Range, ETag, Accept-Ranges, Last-Modified',
};

/**
 * Builds the request handler and its state. `roots` maps a URL prefix to a folder.
 * Returns { handler(origin) → (req, res) => void, requests, resetFaults() }.
 */
export function createHandler({ roots, faults = false, log = () => {} }) {
  const requests = []; // every request, for tests: {origin, method, url, range, status, bytes}
  const droppedOnce = new Set(); // URLs whose `droponce` has fired
  const inflight = new Set(); // open responses, so stalls can be ended on close

  function handler(origin) {
    return (req, res) => {
      const entry = { origin, method: req.method, url: req.url, range: req.headers.range ?? null, status: 0, bytes: 0 };
      requests.push(entry);
      inflight.add(res);
      res.on('close', () => {
        inflight.delete(res);
        log(`${origin} ${req.method} ${req.url}${entry.range ? ` [${entry.range}]` : ''} → ${entry.status} ${entry.bytes} B`);
      });
      try {
        serve(req, res, origin, entry);
      } catch (err) {
        // A bug here must not take the server (and every other test) down.
        log(`error: ${err.stack}`);
        if (!res.headersSent) send(res, entry, 500, 'internal error\n');
        else res.destroy();
      }
    };
  }

  function serve(req, res, origin, entry) {
    const url = new URL(req.url, 'http://x');
    let pathname;
    try {
      pathname = decodeURIComponent(url.pathname);
    } catch {
      return send(res, entry, 400, 'bad path\n');
    }

    // Peel the fault segments off the front of the path.
    const fault = {};
    if (faults && pathname.startsWith('/fault/')) {
      const parts = pathname.split('/').slice(2);
      while (parts.length >= 2 && FAULT_KINDS.has(parts[0])) {
        const n = Number(parts[1]);
        if (!Number.isFinite(n) || n < 0) return send(res, entry, 400, `bad fault parameter ${parts[1]}\n`);
        fault[parts[0]] = n;
        parts.splice(0, 2);
      }
      pathname = '/' + parts.join('/');
    }

    const cors = origin === 'cross' && fault.nocors === undefined;
    if (cors) for (const [k, v] of Object.entries(CORS_HEADERS)) res.setHeader(k, v);

    if (req.method === 'OPTIONS') {
      // Preflight: Range with more than one range, or If-Range, is not CORS-safelisted.
      if (cors) {
        res.setHeader('Access-Control-Allow-Methods', 'GET, HEAD, OPTIONS');
        res.setHeader('Access-Control-Allow-Headers', 'Range, If-Range');
        res.setHeader('Access-Control-Max-Age', '600');
      }
      return send(res, entry, 204, '');
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.setHeader('Allow', 'GET, HEAD, OPTIONS');
      return send(res, entry, 405, 'method not allowed\n');
    }
    if (fault.status !== undefined) return send(res, entry, fault.status, `injected status ${fault.status}\n`);

    const file = resolve(roots, pathname);
    if (!file) return send(res, entry, 404, 'not found\n');
    let stat;
    try {
      stat = fs.statSync(file);
    } catch {
      return send(res, entry, 404, 'not found\n');
    }
    if (!stat.isFile()) return send(res, entry, 404, 'not found\n');

    const size = stat.size;
    const etag = `"${size.toString(16)}-${Math.floor(stat.mtimeMs).toString(16)}"`;
    const ext = path.extname(file).toLowerCase();
    res.setHeader('Content-Type', MIME[ext] ?? 'application/octet-stream');
    res.setHeader('ETag', etag);
    res.setHeader('Last-Modified', stat.mtime.toUTCString());
    res.setHeader('X-Content-Type-Options', 'nosniff');
    // The page keeps models in the Cache API itself; a second copy in the HTTP cache would
    // double the disk use and hide whether the Cache API did its job. The page's own files
    // are revalidated so a rebuild shows at once.
    res.setHeader('Cache-Control', ext === '.gguf' ? 'no-store' : 'no-cache');

    let start = 0;
    let end = size - 1; // inclusive
    let status = 200;
    const rangeHeader = fault.norange === undefined ? req.headers.range : undefined;
    if (fault.norange === undefined) res.setHeader('Accept-Ranges', 'bytes');
    if (rangeHeader && ifRangeMatches(req.headers['if-range'], etag, stat.mtime)) {
      const r = parseRange(rangeHeader, size);
      if (r === 'unsatisfiable') {
        res.setHeader('Content-Range', `bytes */${size}`);
        return send(res, entry, 416, 'range not satisfiable\n');
      }
      if (r) {
        [start, end] = r;
        status = 206;
        res.setHeader('Content-Range', `bytes ${start}-${end}/${size}`);
      }
    } else if (!rangeHeader && req.headers['if-none-match'] === etag && fault.norange === undefined) {
      entry.status = 304;
      res.writeHead(304);
      return res.end();
    }

    const length = size === 0 ? 0 : end - start + 1;
    res.setHeader('Content-Length', String(length + (fault.badlen ?? 0)));
    entry.status = status;
    res.writeHead(status);
    if (req.method === 'HEAD' || length === 0) {
      if (fault.badlen) return res.socket?.destroy(); // the announced bytes never come
      return res.end();
    }

    // Where the body stops early, and what happens there.
    let cut = Infinity;
    let cutAction = null;
    if (fault.drop !== undefined) [cut, cutAction] = [fault.drop, 'drop'];
    if (fault.droponce !== undefined && !droppedOnce.has(req.url) && length > fault.droponce) {
      [cut, cutAction] = [fault.droponce, 'droponce'];
    }
    if (fault.stall !== undefined && fault.stall < cut) [cut, cutAction] = [fault.stall, 'stall'];

    streamFile(res, entry, file, start, end, { cut, cutAction, bytesPerSecond: fault.slow, badlen: !!fault.badlen, onDropOnce: () => droppedOnce.add(req.url) });
  }

  function resetFaults() {
    droppedOnce.clear();
    requests.length = 0;
  }

  function closeAll() {
    for (const res of inflight) res.destroy();
  }

  return { handler, requests, resetFaults, closeAll };
}

function send(res, entry, status, body) {
  entry.status = status;
  res.statusCode = status;
  if (body) res.setHeader('Content-Type', 'text/plain; charset=utf-8');
  res.setHeader('Content-Length', Buffer.byteLength(body));
  res.setHeader('Cache-Control', 'no-store');
  res.end(body);
}

// Maps a URL path onto a file under one of the roots; null for anything outside them.
function resolve(roots, pathname) {
  if (pathname.includes('\0')) return null;
  // Longest prefix first, so /models/… wins over /.
  const prefixes = Object.keys(roots).sort((a, b) => b.length - a.length);
  for (const prefix of prefixes) {
    const p = prefix === '/' ? '/' : prefix.replace(/\/?$/, '/');
    if (!pathname.startsWith(p)) continue;
    const root = path.resolve(roots[prefix]);
    let rel = pathname.slice(p.length);
    if (rel === '' || rel.endsWith('/')) rel += 'index.html';
    const file = path.resolve(root, '.' + path.posix.normalize('/' + rel));
    if (file !== root && !file.startsWith(root + path.sep)) return null;
    return file;
  }
  return null;
}

// If-Range holds an ETag or an HTTP date; the Range applies only when it still matches, so a
// resumed download never splices bytes of two different files.
function ifRangeMatches(ifRange, etag, mtime) {
  if (!ifRange) return true;
  if (ifRange.startsWith('"') || ifRange.startsWith('W/')) return ifRange === etag;
  const t = Date.parse(ifRange);
  return Number.isFinite(t) && Math.floor(mtime.getTime() / 1000) * 1000 <= t;
}

/**
 * One `bytes=` range → [start, end] (inclusive), 'unsatisfiable', or null to ignore the header
 * (malformed, other units, or several ranges: RFC 9110 lets a server answer those with 200).
 */
export function parseRange(header, size) {
  const m = /^bytes=(\d*)-(\d*)$/.exec(header.trim());
  if (!m || (m[1] === '' && m[2] === '')) return null;
  let start;
  let end;
  if (m[1] === '') {
    // Suffix range: the last N bytes.
    const n = Number(m[2]);
    if (n === 0) return 'unsatisfiable';
    start = Math.max(0, size - n);
    end = size - 1;
  } else {
    start = Number(m[1]);
    end = m[2] === '' ? size - 1 : Math.min(Number(m[2]), size - 1);
    if (m[2] !== '' && Number(m[2]) < start) return null;
  }
  if (start >= size) return 'unsatisfiable';
  return [start, end];
}

// Streams file[start..=end] into res, honouring backpressure, with the injected faults.
function streamFile(res, entry, file, start, end, { cut, cutAction, bytesPerSecond, badlen, onDropOnce }) {
  const highWaterMark = bytesPerSecond ? Math.max(1, Math.min(64 * 1024, Math.floor(bytesPerSecond / 10))) : 256 * 1024;
  const stream = fs.createReadStream(file, { start, end, highWaterMark });
  let stalled = false;
  res.on('close', () => stream.destroy());
  stream.on('error', () => res.destroy());

  const began = Date.now();
  stream.on('data', (chunk) => {
    if (entry.bytes + chunk.length >= cut) {
      const head = chunk.subarray(0, cut - entry.bytes);
      entry.bytes += head.length;
      stream.destroy();
      const after = () => {
        if (cutAction === 'stall') {
          stalled = true; // keep the socket open and silent; res 'close' cleans up
          return;
        }
        if (cutAction === 'droponce') onDropOnce();
        res.socket?.destroy();
      };
      if (head.length) res.write(head, after);
      else after();
      return;
    }
    entry.bytes += chunk.length;
    const ok = res.write(chunk);
    if (bytesPerSecond) {
      // Pause until this many bytes are due at the given rate.
      const due = began + (entry.bytes / bytesPerSecond) * 1000;
      stream.pause();
      setTimeout(() => (ok ? stream.resume() : res.once('drain', () => stream.resume())), Math.max(0, due - Date.now()));
    } else if (!ok) {
      stream.pause();
      res.once('drain', () => stream.resume());
    }
  });
  stream.on('end', () => {
    if (stalled) return;
    // badlen: the body is complete but shorter than announced; closing the socket is the
    // only way the client learns no more bytes are coming.
    if (badlen) res.write(Buffer.alloc(0), () => res.socket?.destroy());
    else res.end();
  });
}

/**
 * Starts the server(s). `port`/`corsPort` 0 picks free ports. Resolves to
 * { url, crossUrl, requests, resetFaults, close() }.
 */
export async function createServer({
  host = '127.0.0.1',
  port = 8080,
  corsPort,
  dist = 'dist',
  models = 'models',
  fixtures,
  roots: extraRoots = {}, // more URL prefix → folder pairs (tests serve generated files)
  faults = false,
  log = () => {},
} = {}) {
  const roots = { '/': dist, '/models/': models, ...extraRoots };
  if (fixtures) roots['/fixtures/'] = fixtures;
  const h = createHandler({ roots, faults, log });

  const listen = (server, p) =>
    new Promise((resolveListen, reject) => {
      server.once('error', reject);
      server.listen(p, host, () => resolveListen(server.address().port));
    });

  const main = http.createServer(h.handler('same'));
  const mainPort = await listen(main, port);
  let cross = null;
  let crossPort = null;
  if (faults || corsPort !== undefined) {
    cross = http.createServer(h.handler('cross'));
    crossPort = await listen(cross, corsPort ?? (port === 0 ? 0 : port + 1));
  }
  const hostForUrl = host.includes(':') ? `[${host}]` : host;
  return {
    url: `http://${hostForUrl}:${mainPort}`,
    // The same host on another port is another origin, which is all CORS needs.
    crossUrl: cross ? `http://${hostForUrl}:${crossPort}` : null,
    requests: h.requests,
    resetFaults: h.resetFaults,
    async close() {
      h.closeAll();
      for (const s of [main, cross]) {
        if (!s) continue;
        s.closeAllConnections();
        await new Promise((r) => s.close(r));
      }
    },
  };
}

function parseArgs(argv) {
  const opts = {};
  const take = (i) => {
    if (i + 1 >= argv.length) throw new Error(`${argv[i]} needs a value`);
    return argv[i + 1];
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    switch (a) {
      case '--port': opts.port = Number(take(i++)); break;
      case '--cors-port': opts.corsPort = Number(take(i++)); break;
      case '--host': opts.host = take(i++); break;
      case '--dist': opts.dist = take(i++); break;
      case '--models': opts.models = take(i++); break;
      case '--fixtures': opts.fixtures = take(i++); break;
      case '--faults': opts.faults = true; break;
      case '--quiet': opts.quiet = true; break;
      case '-h':
      case '--help':
        {
          // The header comment is the help text.
          const lines = fs.readFileSync(fileURLToPath(import.meta.url), 'utf8').split('\n').slice(1);
          const end = lines.findIndex((l) => !l.startsWith('//'));
          console.log(lines.slice(0, end).map((l) => l.replace(/^\/\/ ?/, '')).join('\n'));
        }
        process.exit(0);
        break;
      default:
        throw new Error(`unknown argument ${a} (try --help)`);
    }
  }
  return opts;
}

async function main() {
  let opts;
  try {
    opts = parseArgs(process.argv.slice(2));
  } catch (e) {
    console.error(`serve.mjs: ${e.message}`);
    process.exit(2);
  }
  const dist = opts.dist ?? 'dist';
  if (!fs.existsSync(path.join(dist, 'index.html'))) {
    console.error(`serve.mjs: ${dist}/index.html is missing; build the page first (bash scripts/serve.sh does)`);
    process.exit(1);
  }
  const server = await createServer({ ...opts, log: opts.quiet ? () => {} : (l) => console.log(l) });
  console.log(`coco: serving ${dist}/ at ${server.url}/ and ${opts.models ?? 'models'}/ at ${server.url}/models/`);
  if (opts.fixtures) console.log(`coco: fixtures ${opts.fixtures}/ at ${server.url}/fixtures/`);
  if (server.crossUrl) console.log(`coco: cross-origin listener at ${server.crossUrl}/${opts.faults ? ' (fault injection on)' : ''}`);
  const stop = async () => {
    await server.close();
    process.exit(0);
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}

if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) main();

// scripts/serve.mjs on its own (no browser, no build): the HTTP behaviour the page and the
// other e2e tests rely on. Runs in about a second.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import http from 'node:http';
import { createServer, parseRange } from '../../scripts/serve.mjs';

const SIZE = 1_000_000;
const BODY = Buffer.alloc(SIZE, 0).map((_, i) => (i * 7 + (i >> 8)) & 0xff);

// A raw GET that reports how the body ended: fetch() hides a cut connection behind a
// generic error, and the tests need to see exactly how many bytes came.
function get(url, headers = {}, { method = 'GET', timeoutMs = 5000 } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, headers }, (res) => {
      const chunks = [];
      let ended = 'complete';
      res.on('data', (c) => chunks.push(c));
      res.on('aborted', () => (ended = 'aborted'));
      res.on('error', () => (ended = 'aborted'));
      res.on('close', () => {
        const body = Buffer.concat(chunks);
        const announced = Number(res.headers['content-length']);
        if (ended === 'complete' && Number.isFinite(announced) && body.length < announced && method !== 'HEAD') ended = 'aborted';
        resolve({ status: res.statusCode, headers: res.headers, body, ended });
      });
    });
    req.setTimeout(timeoutMs, () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end();
  });
}

describe('scripts/serve.mjs', () => {
  let dir;
  let server;

  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'coco-serve-test-'));
    for (const d of ['dist', 'models', 'fixtures']) fs.mkdirSync(path.join(dir, d));
    fs.writeFileSync(path.join(dir, 'dist/index.html'), '<!doctype html><title>t</title>');
    fs.writeFileSync(path.join(dir, 'dist/app_bg.wasm'), Buffer.from([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0]));
    fs.writeFileSync(path.join(dir, 'models/m.gguf'), BODY);
    fs.writeFileSync(path.join(dir, 'secret.txt'), 'outside the roots');
    server = await createServer({
      port: 0,
      dist: path.join(dir, 'dist'),
      models: path.join(dir, 'models'),
      fixtures: path.join(dir, 'fixtures'),
      faults: true,
    });
  });
  after(async () => {
    await server?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('parses single byte ranges, and ignores what it may ignore', () => {
    assert.deepEqual(parseRange('bytes=0-99', 1000), [0, 99]);
    assert.deepEqual(parseRange('bytes=900-', 1000), [900, 999]);
    assert.deepEqual(parseRange('bytes=-100', 1000), [900, 999]);
    assert.deepEqual(parseRange('bytes=990-5000', 1000), [990, 999]);
    assert.equal(parseRange('bytes=1000-', 1000), 'unsatisfiable');
    assert.equal(parseRange('bytes=-0', 1000), 'unsatisfiable');
    assert.equal(parseRange('bytes=0-1,5-9', 1000), null);
    assert.equal(parseRange('items=0-1', 1000), null);
    assert.equal(parseRange('bytes=9-5', 1000), null);
  });

  it('serves the page with the right MIME types, and index.html at /', async () => {
    const root = await get(`${server.url}/`);
    assert.equal(root.status, 200);
    assert.match(root.headers['content-type'], /^text\/html/);
    const wasm = await get(`${server.url}/app_bg.wasm`);
    assert.equal(wasm.headers['content-type'], 'application/wasm');
  });

  it('serves a model whole, with Accept-Ranges, ETag and no-store', async () => {
    const r = await get(`${server.url}/models/m.gguf`);
    assert.equal(r.status, 200);
    assert.equal(r.headers['accept-ranges'], 'bytes');
    assert.equal(r.headers['content-length'], String(SIZE));
    assert.match(r.headers.etag, /^"[0-9a-f]+-[0-9a-f]+"$/);
    assert.equal(r.headers['cache-control'], 'no-store');
    assert.ok(r.body.equals(BODY));
  });

  it('answers HEAD with the length and no body', async () => {
    const r = await get(`${server.url}/models/m.gguf`, {}, { method: 'HEAD' });
    assert.equal(r.status, 200);
    assert.equal(r.headers['content-length'], String(SIZE));
    assert.equal(r.body.length, 0);
  });

  it('answers a Range with 206 and Content-Range, and an unsatisfiable one with 416', async () => {
    const r = await get(`${server.url}/models/m.gguf`, { Range: 'bytes=1000-1999' });
    assert.equal(r.status, 206);
    assert.equal(r.headers['content-range'], `bytes 1000-1999/${SIZE}`);
    assert.ok(r.body.equals(BODY.subarray(1000, 2000)));
    const tail = await get(`${server.url}/models/m.gguf`, { Range: 'bytes=-10' });
    assert.ok(tail.body.equals(BODY.subarray(SIZE - 10)));
    const bad = await get(`${server.url}/models/m.gguf`, { Range: `bytes=${SIZE}-` });
    assert.equal(bad.status, 416);
    assert.equal(bad.headers['content-range'], `bytes */${SIZE}`);
  });

  it('applies a Range only while If-Range still matches the ETag', async () => {
    const { headers } = await get(`${server.url}/models/m.gguf`, {}, { method: 'HEAD' });
    const same = await get(`${server.url}/models/m.gguf`, { Range: 'bytes=0-9', 'If-Range': headers.etag });
    assert.equal(same.status, 206);
    const changed = await get(`${server.url}/models/m.gguf`, { Range: 'bytes=0-9', 'If-Range': '"other"' });
    assert.equal(changed.status, 200);
    assert.equal(changed.body.length, SIZE);
  });

  it('never serves files outside its roots', async () => {
    for (const p of ['/../secret.txt', '/models/../../secret.txt', '/models/%2e%2e/secret.txt', '/models/..%2fsecret.txt']) {
      const r = await get(`${server.url}${p}`);
      assert.equal(r.status, 404, p);
    }
  });

  it('fault drop/N: the connection dies after N body bytes', async () => {
    const r = await get(`${server.url}/fault/drop/5000/models/m.gguf`);
    assert.equal(r.ended, 'aborted');
    assert.equal(r.body.length, 5000);
    assert.ok(r.body.equals(BODY.subarray(0, 5000)));
  });

  it('fault droponce/N: cut the first time, whole the next', async () => {
    const url = `${server.url}/fault/droponce/7000/models/m.gguf`;
    const first = await get(url);
    assert.equal(first.ended, 'aborted');
    assert.equal(first.body.length, 7000);
    const resumed = await get(url, { Range: 'bytes=7000-' });
    assert.equal(resumed.status, 206);
    assert.equal(resumed.ended, 'complete');
    assert.ok(Buffer.concat([first.body, resumed.body]).equals(BODY));
  });

  it('faults status/C, badlen/N and norange/0', async () => {
    assert.equal((await get(`${server.url}/fault/status/500/models/m.gguf`)).status, 500);
    assert.equal((await get(`${server.url}/fault/status/404/models/m.gguf`)).status, 404);
    const badlen = await get(`${server.url}/fault/badlen/100/models/m.gguf`);
    assert.equal(badlen.headers['content-length'], String(SIZE + 100));
    assert.equal(badlen.body.length, SIZE);
    assert.equal(badlen.ended, 'aborted');
    const norange = await get(`${server.url}/fault/norange/0/models/m.gguf`, { Range: 'bytes=0-9' });
    assert.equal(norange.status, 200);
    assert.equal(norange.headers['accept-ranges'], undefined);
    assert.equal(norange.body.length, SIZE);
  });

  it('fault stall/N: N bytes, then silence', async () => {
    const r = await get(`${server.url}/fault/stall/3000/models/m.gguf`, {}, { timeoutMs: 800 }).catch((e) => e);
    // The request times out on our side; the server must not have sent more than N bytes.
    assert.ok(r instanceof Error || r.body.length === 3000, `stalled (got ${r.body?.length} bytes)`);
    const entry = server.requests.filter((q) => q.url.startsWith('/fault/stall/')).at(-1);
    assert.equal(entry.bytes, 3000);
  });

  it('the cross-origin listener sends CORS headers, except under nocors', async () => {
    const r = await get(`${server.crossUrl}/models/m.gguf`, { Range: 'bytes=0-0', Origin: server.url });
    assert.equal(r.headers['access-control-allow-origin'], '*');
    assert.match(r.headers['access-control-expose-headers'], /Content-Range/);
    const pre = await get(`${server.crossUrl}/models/m.gguf`, { Origin: server.url, 'Access-Control-Request-Headers': 'range' }, { method: 'OPTIONS' });
    assert.equal(pre.status, 204);
    assert.match(pre.headers['access-control-allow-headers'], /Range/);
    const none = await get(`${server.crossUrl}/fault/nocors/0/models/m.gguf`, { Origin: server.url });
    assert.equal(none.status, 200);
    assert.equal(none.headers['access-control-allow-origin'], undefined);
    const same = await get(`${server.url}/models/m.gguf`, { Range: 'bytes=0-0' });
    assert.equal(same.headers['access-control-allow-origin'], undefined, 'the page origin needs no CORS');
  });
});

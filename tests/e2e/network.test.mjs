// Broken downloads (dropped, stalled, refused, mis-sized) and a storage too small for the
// copy. The test server injects each fault on a path of its
// own (/fault/<kind>/<param>/…, see scripts/serve.mjs); the page must end in a clear error
// that names the cause, keep nothing partial in the Cache API, and resume where Range works.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  GREEDY, cachedUrls, generate, guard, loadModel, openPage, record, state, storageReport, text, useTestServer,
  waitState,
} from './lib/harness.mjs';
import { nativeRun } from './lib/native.mjs';

const FIXTURE = 'tests/fixtures/llama-spm-q4_0.gguf'; // 10,603,776 bytes
const FILE = 'fixtures/llama-spm-q4_0.gguf';
const CUT = 3_000_000; // well past the header, well before the end

describe('network faults while loading a model', { timeout: 20 * 60_000 }, () => {
  const shared = useTestServer({ sharedBrowser: true });

  // One fresh page per case (same profile, so the cache checks see everything).
  async function onPage(t, body) {
    const page = await shared.session.context.newPage();
    try {
      await guard(t, shared.session, () => body(page), page);
    } finally {
      await page.close();
    }
  }

  async function assertNotCached(page, url) {
    const cached = await cachedUrls(page);
    const leftovers = cached.filter((u) => u.endsWith(url));
    assert.deepEqual(leftovers, [], `no cache entry left for ${url}`);
  }

  // Loads `url`, expects state "error" with a message matching `cause`, and no cache entry.
  function expectError(name, url, cause, { crossOrigin = false } = {}) {
    it(name, { timeout: 3 * 60_000 }, (t) =>
      onPage(t, async (page) => {
        await openPage(page, shared.server);
        const full = crossOrigin ? `${shared.server.crossUrl}/${url}` : url;
        const t0 = Date.now();
        const s = await loadModel(page, full, { until: ['error', 'loaded', 'not-yet'], timeout: 150_000 });
        const message = await text(page, '#error');
        assert.equal(s, 'error', `ends in state "error" (state ${s}, message "${message}")`);
        assert.match(message, cause, `#error names the cause`);
        await assertNotCached(page, url);
        record(`fault: ${name}`, { seconds: (Date.now() - t0) / 1000, message });
      }));
  }

  expectError('a cut mid-stream on a server without Range support', `fault/norange/0/drop/${CUT}/${FILE}`,
    /interrupt|connection|network|closed|reset|cut|incomplete|ended|failed|broke/i);
  expectError('404 Not Found', `fault/status/404/${FILE}`, /404|not found/i);
  expectError('500 Internal Server Error', `fault/status/500/${FILE}`, /500|server error/i);
  expectError('a Content-Length larger than the body', `fault/norange/0/badlen/1000/${FILE}`,
    /length|incomplete|short|truncat|interrupt|ended|closed|network|failed/i);
  expectError('a cross-origin server without CORS headers', `fault/nocors/0/${FILE}`,
    /CORS|cross-origin|Access-Control|allow|blocked/i, { crossOrigin: true });

  it('a server that drops every response gets a few resumes, then a clear error and no cache entry', { timeout: 3 * 60_000 }, (t) =>
    onPage(t, async (page) => {
      await openPage(page, shared.server);
      // 2 MB per response: more than the first header read (1 MiB), and 1 MiB + 4 × 2 MB (the
      // first try and its resumes) stays short of the file's 10.6 MB.
      const url = `fault/drop/2000000/${FILE}`;
      const before = shared.server.requests.length;
      const s = await loadModel(page, url, { until: ['error', 'loaded'], timeout: 150_000 });
      const message = await text(page, '#error');
      assert.equal(s, 'error', `ends in state "error" (message "${message}")`);
      assert.match(message, /interrupt|connection|network|closed|reset|cut|incomplete|ended|failed|broke|drop/i, '#error names the cause');
      const resumes = shared.server.requests.slice(before).filter((r) => r.url === `/${url}` && /^bytes=[1-9]\d*-/.test(r.range ?? ''));
      assert.ok(resumes.length >= 1, `it tried to resume with Range before giving up (requests: ${JSON.stringify(shared.server.requests.slice(before))})`);
      await assertNotCached(page, url);
      record('fault: drops on every response', { resumes: resumes.length, message });
    }));

  it('a stalled download can be cancelled with #cancel-load, and the next load works', { timeout: 4 * 60_000 }, (t) =>
    onPage(t, async (page) => {
      await openPage(page, shared.server);
      const url = `fault/stall/${CUT}/${FILE}`;
      await loadModel(page, url, { until: ['downloading'] });
      // Let the stall set in: the bytes stop at CUT.
      await page.waitForTimeout(3000);
      assert.equal(await state(page), 'downloading', 'still downloading while stalled');
      await page.click('#cancel-load');
      const s = await waitState(page, ['ready', 'error'], { timeout: 30_000, what: 'after cancel' }).catch(async (e) => {
        throw new Error(`${e.message}: cancel did not end the stalled download`);
      });
      if (s === 'error') assert.match(await text(page, '#error'), /cancel/i, 'a cancel reported as an error says it was cancelled');
      await assertNotCached(page, url);
      const last = shared.server.requests.filter((r) => r.url.includes('/fault/stall/')).at(-1);
      assert.ok(last, 'the stalled request reached the server');
      // The page is usable again: the same file without the fault loads.
      await loadModel(page, FILE);
    }));

  it('a cut on a server with Range support is resumed and the model works', { timeout: 5 * 60_000 }, (t) =>
    onPage(t, async (page) => {
      const native = nativeRun(FIXTURE, 'Once upon a time', 4);
      await openPage(page, shared.server);
      const url = `fault/droponce/${CUT}/${FILE}`;
      const before = shared.server.requests.length;
      await loadModel(page, url);
      const seen = shared.server.requests.slice(before).filter((r) => r.url === `/${url}`);
      const dropped = seen.find((r) => r.bytes === CUT);
      assert.ok(dropped, `one response was cut at ${CUT} bytes (requests: ${JSON.stringify(seen)})`);
      const resumed = seen.slice(seen.indexOf(dropped) + 1).find((r) => r.range && /^bytes=[1-9]\d*-/.test(r.range) && r.status === 206);
      assert.ok(resumed, `a Range request resumed after the cut (requests: ${JSON.stringify(seen)})`);
      const cached = await cachedUrls(page);
      assert.ok(cached.some((u) => u.endsWith(url)), `the resumed, complete file is cached (${await storageReport(page)})`);
      const run = await generate(page, { prompt: 'Once upon a time', fields: { ...GREEDY, 'max-tokens': '4' } });
      assert.deepEqual(run.ids, (await native).ids, 'the resumed bytes are right: greedy output equals native');
      record('fault: resumed download', { resumed_from: resumed.range, requests: seen.length });
    }));

  // Chromium's Cache.put rejects a body past the origin's quota with a QuotaExceededError (a
  // full disk with a bare "network error", which the page tells from the storage estimate);
  // the page must say the storage is full, with the numbers, and still run the model.
  it('a file larger than the storage quota loads and runs, is not kept, and the status says the storage is full', { timeout: 4 * 60_000 }, (t) =>
    onPage(t, async (page) => {
      const native = nativeRun(FIXTURE, 'Once upon a time', 4);
      const cdp = await page.context().newCDPSession(page);
      const origin = new URL(shared.server.url).origin;
      // A real quota, set through the DevTools protocol: 2 MB for this origin.
      await cdp.send('Storage.overrideQuotaForOrigin', { origin, quotaSize: 2_000_000 });
      try {
        await openPage(page, shared.server);
        // (a query of its own: not a copy an earlier case kept)
        const url = `${FILE}?quota=2MB`;
        await loadModel(page, url);
        const status = await text(page, '#status-text');
        assert.match(status, /not kept \(the browser's storage for this site is full: the file needs 10\.6 MB(, the browser estimates .* free)?; it said "/,
          `the status says the storage is full, with the numbers ("${status}")`);
        await assertNotCached(page, url);
        const run = await generate(page, { prompt: 'Once upon a time', fields: { ...GREEDY, 'max-tokens': '4' } });
        assert.deepEqual(run.ids, (await native).ids, 'the model that could not be kept runs: greedy output equals native');
        record('storage full', { status });
      } finally {
        await cdp.send('Storage.overrideQuotaForOrigin', { origin });
      }
    }));
});

// Share links from strangers: fields are text, never HTML; model URLs are
// http(s) or relative; a cross-origin model asks first, showing host and size, and nothing
// big downloads before that click.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { guard, openPage, settleLoad, state, text, useTestServer, waitState } from './lib/harness.mjs';

const FILE = 'fixtures/llama-spm-q4_0.gguf';
const FILE_BYTES = 10_603_776;
const PAYLOADS = [
  '<img src=x onerror="window.__pwned=1">',
  '</script><script>window.__pwned=1</script>',
  '"><svg onload="window.__pwned=1">',
];

// Requests for a model file (not the page, whose query string names the model too).
const pathOf = (r) => new URL(r.url, 'http://x').pathname;

describe('untrusted share links', { timeout: 15 * 60_000 }, () => {
  const shared = useTestServer({ sharedBrowser: true });

  async function onPage(t, body) {
    const page = await shared.session.context.newPage();
    // An alert/confirm from injected script would block the page; record it instead.
    page.on('dialog', (d) => {
      shared.session.logs.push(`dialog: ${d.type()} ${d.message()}`);
      d.dismiss().catch(() => {});
    });
    try {
      await guard(t, shared.session, () => body(page), page);
    } finally {
      await page.close();
    }
  }

  async function assertNotPwned(page) {
    const facts = await page.evaluate(() => ({
      pwned: window.__pwned,
      imgs: document.querySelectorAll('img[src="x"], #output img, #chat-log img, #prompt img').length,
      svgs: document.querySelectorAll('svg[onload]').length,
      scripts: [...document.scripts].filter((s) => s.textContent.includes('__pwned')).length,
    }));
    assert.deepEqual(facts, { pwned: undefined, imgs: 0, svgs: 0, scripts: 0 }, 'no payload ran or became markup');
  }

  for (const [i, payload] of PAYLOADS.entries()) {
    it(`a prompt like ${JSON.stringify(payload)} in a link is shown as text, and runs as text`, { timeout: 4 * 60_000 }, (t) =>
      onPage(t, async (page) => {
        const chat = JSON.stringify([{ role: 'user', content: payload }]);
        const q = new URLSearchParams({ model: FILE, mode: 'complete', prompt: payload, chat, temp: '0', max: '1', seed: String(i) });
        await page.goto(`${shared.server.url}/?${q}`);
        await waitState(page, ['confirm', 'loaded', 'ready', 'downloading', 'inspecting', 'generating'], { timeout: 60_000 });
        assert.equal(await page.inputValue('#prompt'), payload, 'the prompt is restored verbatim, as text');
        await assertNotPwned(page);
        // Let the link run through: the output and stats render too.
        await settleLoad(page, { until: ['loaded'] });
        await page.waitForFunction(() => window.cocoPage?.lastStats || document.getElementById('app')?.dataset.state === 'generating', null, { timeout: 30_000 }).catch(() => {});
        await waitState(page, 'loaded', { timeout: 120_000 });
        await assertNotPwned(page);
      }));
  }

  it('a javascript: model URL in a link is refused and nothing is fetched', { timeout: 2 * 60_000 }, (t) =>
    onPage(t, async (page) => {
      const before = shared.server.requests.length;
      const q = new URLSearchParams({ model: 'javascript:window.__pwned=1//.gguf', prompt: 'hi' });
      await page.goto(`${shared.server.url}/?${q}`);
      await waitState(page, ['ready', 'error'], { timeout: 60_000 });
      await page.waitForTimeout(1000);
      assert.ok(!['confirm', 'downloading', 'inspecting'].includes(await state(page)), 'no load starts');
      const said = `${await text(page, '#error')} ${await text(page, '#model-note')} ${await text(page, '#status-text')}`;
      assert.match(said, /refused|http|not allowed|javascript/i, `the page says the URL was refused (it says: "${said.trim()}")`);
      await assertNotPwned(page);
      const fetched = shared.server.requests.slice(before).filter((r) => pathOf(r).endsWith('.gguf'));
      assert.deepEqual(fetched, [], 'no model request');

      // The same through the URL box.
      await page.fill('#model-url', 'javascript:window.__pwned=1');
      await page.click('#load');
      await page.waitForTimeout(1000);
      assert.ok(!['confirm', 'downloading', 'inspecting', 'loaded'].includes(await state(page)), 'the URL box refuses it too');
      await assertNotPwned(page);
    }));

  it('a cross-origin model link asks first, with host and size, before any bulk download', { timeout: 3 * 60_000 }, (t) =>
    onPage(t, async (page) => {
      const modelUrl = `${shared.server.crossUrl}/${FILE}`;
      const before = shared.server.requests.length;
      await page.goto(`${shared.server.url}/?${new URLSearchParams({ model: modelUrl, prompt: 'hi', max: '2' })}`);
      await waitState(page, 'confirm', { timeout: 60_000 });
      assert.ok(await page.isVisible('#confirm'), 'the confirmation dialog is open');
      const host = new URL(shared.server.crossUrl).host;
      assert.ok((await text(page, '#confirm-host')).includes(host), `#confirm-host shows ${host}`);
      const size = await text(page, '#confirm-size');
      assert.match(size, /10\.6\s*MB|10\.1\s*MiB|10,603,776|10603776/, `#confirm-size shows the size (got "${size}")`);
      // Only small probes (HEAD or a header Range) may have reached the model host so far.
      await page.waitForTimeout(1000);
      const sent = shared.server.requests.slice(before).filter((r) => pathOf(r).endsWith(FILE));
      const bulk = sent.filter((r) => r.bytes > 2_000_000);
      assert.deepEqual(bulk, [], `no bulk download before the click (requests: ${JSON.stringify(sent)})`);
      assert.ok(sent.every((r) => r.origin === 'cross'), 'the requests went to the cross-origin host');

      await page.click('#confirm-cancel');
      await waitState(page, ['ready', 'error'], { timeout: 30_000, what: 'after cancelling the confirmation' });
      const after = shared.server.requests.slice(before).filter((r) => pathOf(r).endsWith(FILE));
      assert.ok(after.reduce((n, r) => n + r.bytes, 0) < FILE_BYTES / 4, 'cancelling downloads nothing more');
    }));
});

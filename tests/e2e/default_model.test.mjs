// The default model, Gemma-3-270M Q4_K_M (253 MB, same origin): streamed into the GPU with a
// small wasm heap, sensible greedy text, and a second load from the Cache API that makes no
// network request for the model. The slowest file: SwiftShader runs the GPU work on 2 cores.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import {
  ARTIFACTS, DEFAULT_MODEL, GREEDY, ROOT, firstDifference, generate, guard, launch, longTasksSince,
  openPage, pageNow, record, settleLoad, storageReport, useTestServer,
} from './lib/harness.mjs';
import { nativeRun } from './lib/native.mjs';

const PROMPT = 'The capital of France is';
// Native greedy: " the capital of the country of France." (8 tokens). SwiftShader runs
// Gemma at about 1 token per 10-60 s on 2 cores, so CI may ask for fewer.
const N = Number(process.env.COCO_E2E_GEMMA_TOKENS ?? 8);
const WASM_LIMIT = 64 * 2 ** 20;
// A request for the model file itself (by path: a page URL may name it in its query).
const isModel = (r) => new URL(r.url, 'http://x').pathname.endsWith(DEFAULT_MODEL);

describe('default model (Gemma-3-270M) in the page', { timeout: 40 * 60_000 }, () => {
  let native;
  let userDataDir;
  let networkSeconds;

  // Registered first, so a missing model fails before the server starts.
  before(() => {
    assert.ok(fs.existsSync(path.join(ROOT, DEFAULT_MODEL)), `${DEFAULT_MODEL} is missing: bash scripts/install_model.sh`);
  });
  // Server only: each test launches its own browser (the second reopens the first's profile).
  const shared = useTestServer();
  before(() => {
    native = nativeRun(DEFAULT_MODEL, PROMPT, N);
    native.catch(() => {}); // awaited in the test; don't let it reject unobserved meanwhile
  });
  after(() => {
    if (userDataDir) fs.rmSync(userDataDir, { recursive: true, force: true });
  });

  // Clicks Load for the default preset; the same-origin default needs no confirmation.
  // Returns the seconds it took and the main thread's long tasks meanwhile.
  async function loadDefault(page) {
    await page.selectOption('#model-preset', { index: 0 });
    const url = await page.inputValue('#model-url');
    assert.ok(url.endsWith(DEFAULT_MODEL), `the first preset is the default model (URL box says "${url}")`);
    const t0 = Date.now();
    const mark = await pageNow(page);
    await page.click('#load');
    const s = await settleLoad(page, { until: ['loaded', 'confirm'], timeout: 20 * 60_000 });
    assert.notEqual(s, 'confirm', 'the same-origin default model asks no confirmation');
    return { seconds: (Date.now() - t0) / 1000, longTasks: await longTasksSince(page, mark) };
  }

  it('loads from the network with a wasm heap peak under 64 MB and generates sensible greedy text', { timeout: 25 * 60_000 }, async (t) => {
    const session = await launch({ server: shared.server, keepProfile: true });
    userDataDir = session.userDataDir;
    try {
      await guard(t, session, async () => {
        const { page } = session;
        await openPage(page, shared.server);
        const load = await loadDefault(page);
        networkSeconds = load.seconds;
        const peak = await page.evaluate(() => window.cocoPage.peakWasm);
        assert.ok(Number.isFinite(peak) && peak > 0, `window.cocoPage.peakWasm is a byte count (got ${peak})`);
        assert.ok(peak < WASM_LIMIT, `wasm heap peak ${(peak / 2 ** 20).toFixed(1)} MiB while loading 253 MB must stay under 64 MiB`);
        const modelRequests = session.requests.filter(isModel);
        assert.ok(modelRequests.length > 0, 'the first load fetched the model from the server');

        const t0 = Date.now();
        const mark = await pageNow(page);
        const run = await generate(page, { prompt: PROMPT, fields: { ...GREEDY, 'max-tokens': N }, timeout: 15 * 60_000 });
        const genSeconds = (Date.now() - t0) / 1000;
        const generateLongTasks = await longTasksSince(page, mark);
        const want = await native;
        const at = firstDifference(run.ids, want.ids);
        assert.equal(at, -1, `page and native differ at token ${at}:\n  page   ${JSON.stringify(run.text)} ${JSON.stringify(run.ids)}\n  native ${JSON.stringify(want.text)} ${JSON.stringify(want.ids)}`);
        assert.match(run.text, /France|Paris|capital|country/, `sensible text for "${PROMPT}" (got ${JSON.stringify(run.text)})`);
        const shot = path.join(ARTIFACTS, 'page-after-generation.png');
        await page.screenshot({ path: shot, fullPage: true });
        console.log(`# screenshot of the page after generation: ${path.relative(ROOT, shot)}`);
        record('gemma network load', {
          seconds: networkSeconds,
          mb_per_s: 253.1 / networkSeconds,
          peak_wasm_mib: peak / 2 ** 20,
          generate_seconds: genSeconds,
          prefill_tok_s: run.prefill_tok_s,
          decode_tok_s: run.decode_tok_s,
          dispatches_per_token: run.dispatches_per_token,
          text: run.text,
          // The main thread's tasks over 50 ms (window.cocoPage.longTasks) in each phase.
          long_tasks_load: load.longTasks,
          long_tasks_generate: generateLongTasks,
        });
      });
    } finally {
      await session.close();
    }
  });

  it('a second load in a new browser comes from the cache, with no network request for the model', { timeout: 15 * 60_000 }, async (t) => {
    assert.ok(userDataDir, 'needs the profile of the first load');
    const session = await launch({ userDataDir, server: shared.server });
    try {
      await guard(t, session, async () => {
        const { page } = session;
        await openPage(page, shared.server);
        const before = shared.server.requests.length;
        const { seconds: cacheSeconds, longTasks } = await loadDefault(page);
        const browserSide = session.requests.filter(isModel);
        const serverSide = shared.server.requests.slice(before).filter(isModel);
        assert.deepEqual(browserSide, [], `no request for the model leaves the page on a cached load (${await storageReport(page)})`);
        assert.deepEqual(serverSide, [], 'the server sees no request for the model on a cached load');
        record('gemma cache load', { seconds: cacheSeconds, network_seconds: networkSeconds, long_tasks_load: longTasks });
      });
    } finally {
      await session.close();
    }
  });
});

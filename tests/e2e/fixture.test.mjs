// The page with a small fixture model (llama, SentencePiece vocabulary, Q4_0, 10.6 MB,
// built by scripts/fixtures.sh): the same greedy tokens as the native CLI, the megakernel
// switch, a share link round trip and a lost device. One browser for the whole file (the
// steps build on each other: the model is loaded once, later pages load it from the cache).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import {
  ARTIFACTS, GREEDY, ROOT, cachedUrls, finishedRun, firstDifference, generate, guard, loadModel,
  longTasksSince, openPage, pageNow, record, settleLoad, state, storageReport, text, useTestServer, waitState,
} from './lib/harness.mjs';
import { coco, nativeRun } from './lib/native.mjs';

const FIXTURE = 'tests/fixtures/llama-spm-q4_0.gguf';
const FIXTURE_URL = 'fixtures/llama-spm-q4_0.gguf'; // relative to the page, as a user would type it
const PROMPT = 'Once upon a time';
const N = 16;
// Later checks generate fewer tokens (SwiftShader is slow) and compare with native's prefix:
// greedy output of n tokens is the first n of a longer greedy run.
const SHORT = 6;
// The Gemma test saves page-after-generation.png (real text); this one shows the fixture's
// random-weight tokens.
const SCREENSHOT = path.join(ARTIFACTS, 'page-after-generation-fixture.png');

describe('fixture model in the page', { timeout: 20 * 60_000 }, () => {
  let native; // {ids, text} from `coco run --temp 0` on lavapipe
  const shared = useTestServer({
    sharedBrowser: true,
    whileLaunching: async () => {
      native = await nativeRun(FIXTURE, PROMPT, N);
    },
  });

  it('loads the fixture streamed from the test server, with a clean capability report', { timeout: 5 * 60_000 }, (t) =>
    guard(t, shared.session, async () => {
      const { page } = shared.session;
      await openPage(page, shared.server);
      assert.equal(await state(page), 'ready', 'a page without a link waits for the user');
      const t0 = Date.now();
      const mark = await pageNow(page);
      await loadModel(page, FIXTURE_URL);
      const seconds = (Date.now() - t0) / 1000;
      const longTasks = await longTasksSince(page, mark);
      const rows = await page.$$eval('#report tr[data-status]', (trs) => trs.map((r) => [r.dataset.status, r.textContent.replace(/\s+/g, ' ').trim()]));
      assert.ok(rows.length > 0, 'the capability report has rows');
      assert.deepEqual(rows.filter(([s]) => s === 'not_yet' || s === 'not-yet'), [], 'no "not yet" row for a supported model');
      // The model details show the fusion plan the engine made for this GPU (model::Plan).
      const plan = await page.$$eval('#plan-steps [data-step]', (ds) => ds.map((d) => [d.dataset.step, d.querySelector('dd')?.textContent ?? '']));
      assert.ok(plan.some(([s]) => s === 'embed') && plan.some(([s]) => s === 'lm head'), `the plan lists the embedding and the LM head: ${JSON.stringify(plan)}`);
      assert.ok(plan.some(([s, d]) => /^qkv/.test(s) && d.startsWith('every layer: ')), `the plan says how Q/K/V run: ${JSON.stringify(plan)}`);
      assert.match(await text(page, '#model-plan'), /[1-9][0-9]* dispatches per decode step/, 'the plan states its dispatch count');
      const cached = await cachedUrls(page);
      assert.ok(cached.some((u) => u.includes('llama-spm-q4_0.gguf')), `the loaded model is in the Cache API (caches hold: ${cached.join(', ') || 'nothing'}; ${await storageReport(page)})`);
      record('fixture load', { seconds, peak_wasm_mb: (await page.evaluate(() => window.cocoPage?.peakWasm)) / 2 ** 20, long_tasks: longTasks });

      // coco asks for `subgroups` itself (wgpu 30 can't in the browser): by default its
      // subgroup kernels run exactly when this browser's adapter offers the feature, its WGSL
      // has the subgroup_id builtins, and the adapter is not a software one (SwiftShader
      // here, where they are slower: the next test forces them).
      const browser = await page.evaluate(async () => {
        const a = await navigator.gpu.requestAdapter();
        return { offered: a.features.has('subgroups'), subgroup_id: navigator.gpu.wgslLanguageFeatures.has('subgroup_id'), packed_4x8: navigator.gpu.wgslLanguageFeatures.has('packed_4x8_integer_dot_product'), sizes: [a.info.subgroupMinSize, a.info.subgroupMaxSize], matrices: a.features.has('chromium-experimental-subgroup-matrix'), matrix_configs: (a.info.subgroupMatrixConfigs ?? []).length };
      });
      const adapter = await page.evaluate(() => window.cocoPage.engine.adapter());
      assert.equal(adapter.subgroups, browser.offered && browser.subgroup_id && !adapter.fallback, `subgroup kernels run iff a hardware adapter offers them (browser ${JSON.stringify(browser)}; coco: ${adapter.subgroups_why})`);
      assert.ok(adapter.subgroups_why.length > 0, 'the report says why');
      // The int8 decode matvec only where the browser's WGSL has the packed 4×8-bit dot product.
      assert.equal(adapter.int8_dot, browser.packed_4x8, `int8 dot products iff the browser's WGSL lists them (browser ${JSON.stringify(browser)})`);
      // The tensor-core offer is the browser's own (wgpu's web backend knows none), with as
      // many configurations as adapter.info lists.
      const offer = browser.matrices
        ? new RegExp(`subgroup-matrix offered \\| ${browser.matrix_configs} configuration`)
        : /subgroup-matrix not offered/;
      assert.match(adapter.cooperative_matrix, offer, `the report states the browser's subgroup-matrix offer (browser ${JSON.stringify(browser)})`);
      record('fixture subgroups', { used: adapter.subgroups, why: adapter.subgroups_why, matrices: adapter.cooperative_matrix, browser });
    }));

  it(`greedy output equals native \`coco run --temp 0\` (${N} tokens)`, { timeout: 5 * 60_000 }, (t) =>
    guard(t, shared.session, async () => {
      const { page } = shared.session;
      const t0 = Date.now();
      const mark = await pageNow(page);
      const run = await generate(page, { prompt: PROMPT, fields: { ...GREEDY, 'max-tokens': N } });
      const seconds = (Date.now() - t0) / 1000;
      const longTasks = await longTasksSince(page, mark);
      const at = firstDifference(run.ids, native.ids);
      assert.equal(at, -1, `page and native differ at token ${at}:\n  page   ${JSON.stringify(run.ids)} ${JSON.stringify(run.text)}\n  native ${JSON.stringify(native.ids)} ${JSON.stringify(native.text)}`);
      assert.equal(run.text, native.text, 'same ids must decode to the same text');
      assert.ok(run.output.includes(native.text.trim().slice(0, 8)), `#output shows the generated text (it shows ${JSON.stringify(run.output.slice(0, 200))})`);
      record('fixture greedy', { seconds, prefill_tok_s: run.prefill_tok_s, decode_tok_s: run.decode_tok_s, dispatches_per_token: run.dispatches_per_token, long_tasks: longTasks });

      await page.screenshot({ path: SCREENSHOT, fullPage: true });
      console.log(`# screenshot of the page after generating with the fixture: ${path.relative(ROOT, SCREENSHOT)}`);
    }));

  it('subgroups=1 link: the subgroup kernels through the browser\'s own compiler, the same greedy tokens', { timeout: 5 * 60_000 }, (t) =>
    guard(t, shared.session, async () => {
      const page = await shared.session.context.newPage();
      try {
        await openPage(page, shared.server, '?subgroups=1');
        await loadModel(page, FIXTURE_URL);
        const offered = await page.evaluate(async () => (await navigator.gpu.requestAdapter()).features.has('subgroups') && navigator.gpu.wgslLanguageFeatures.has('subgroup_id'));
        const adapter = await page.evaluate(() => window.cocoPage.engine.adapter());
        assert.equal(adapter.subgroups, offered, `subgroups=1 uses them wherever granted (${adapter.subgroups_why})`);
        const run = await generate(page, { prompt: PROMPT, fields: { ...GREEDY, 'max-tokens': SHORT } });
        const at = firstDifference(run.ids, native.ids.slice(0, SHORT));
        assert.equal(at, -1, `subgroup kernels in the page and native differ at token ${at}: page ${JSON.stringify(run.ids)} native ${JSON.stringify(native.ids)}`);
        record('fixture greedy, subgroups=1', { used: adapter.subgroups, decode_tok_s: run.decode_tok_s, dispatches_per_token: run.dispatches_per_token });
      } finally {
        await page.close();
      }
    }));

  const linkGemms = [
    ['4x8', /wide64x128 \(asked for by name\)/],
    ['tiled', /tiled64x64 \(asked for by name\)/],
    // The dot-product tiles (x' as one int8 level) (the fixture is Q4_0, which has levels).
    ['dot4', /dot4_q8_64x64 \(weight levels by x' as one int8 level on dot4I8Packed/],
  ];
  for (const [gemm, planned] of linkGemms) {
    it(`gemm=${gemm} link: the prefill tile kernels through the browser's own compiler, the same greedy tokens`, { timeout: 5 * 60_000 }, (t) =>
      guard(t, shared.session, async () => {
        // A prompt past the matvec's 32 tokens, so its prefill step runs the tiles: with 4x8
        // the wide GEMM for the products and the 64 × 64 tiles for the fused Q/K/V; with
        // tiled the 64 × 64 tiles everywhere, W_down's K (512) split between two workgroups
        // (shaders/matmul/tile_split.wgsl). A software adapter prefills with the matvec
        // unless a GEMM is named, in the link as natively.
        const prompt = 'Once upon a time there was a small village by the sea where the people fished every morning, sang every evening, and told long stories about the old lighthouse on the hill';
        const want = await coco(['run', '-m', FIXTURE, '-p', prompt, '-n', String(SHORT), '--temp', '0', '--json'], { env: { COCO_GEMM: gemm } });
        assert.ok(want.prompt_ids.length > 32, `the prompt is ${want.prompt_ids.length} tokens, past the matvec's 32`);
        const page = await shared.session.context.newPage();
        try {
          await openPage(page, shared.server, `?gemm=${gemm}`);
          await loadModel(page, FIXTURE_URL);
          const plan = await text(page, '#model-plan');
          assert.match(plan, planned, `the plan names the GEMM the link asked for: ${plan.slice(0, 400)}`);
          const run = await generate(page, { prompt, fields: { ...GREEDY, 'max-tokens': SHORT } });
          const at = firstDifference(run.ids, want.ids);
          assert.equal(at, -1, `the tiles in the page and native differ at token ${at}: page ${JSON.stringify(run.ids)} native ${JSON.stringify(want.ids)}`);
          record(`fixture greedy, gemm=${gemm}`, { prompt_tokens: want.prompt_ids.length, prefill_tok_s: run.prefill_tok_s });
        } finally {
          await page.close();
        }
      }));
  }

  it('default sampler settings: sampled on the GPU, the same tokens as native `coco run` with the same seed', { timeout: 5 * 60_000 }, (t) =>
    guard(t, shared.session, async () => {
      const { page } = shared.session;
      // The page's and the CLI's defaults: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05,
      // penalty 1.1 over 64 tokens, seed 42.
      const defaults = { temperature: '0.8', 'top-k': '40', 'top-p': '0.95', 'min-p': '0.05', 'repeat-penalty': '1.1', seed: '42' };
      const want = await coco(['run', '-m', FIXTURE, '-p', PROMPT, '-n', String(N), '--json']);
      assert.equal(want.stats.sampler_on_gpu, true, 'native samples on the GPU by default');
      const run = await generate(page, { prompt: PROMPT, fields: { ...defaults, 'max-tokens': N } });
      const at = firstDifference(run.ids, want.ids);
      assert.equal(at, -1, `sampled: page and native differ at token ${at}:\n  page   ${JSON.stringify(run.ids)}\n  native ${JSON.stringify(want.ids)}`);
      assert.equal(run.sampler_on_gpu, true, 'the page sampled on the GPU');
      const shown = await text(page, '#stats [data-stat=sampling]');
      assert.ok(shown.startsWith('GPU'), `the Numbers panel says where sampling ran: "${shown}"`);
      const greedy = await generate(page, { prompt: PROMPT, fields: { ...GREEDY, 'max-tokens': N } });
      record('fixture default sampler vs greedy', {
        sampled_decode_tok_s: run.decode_tok_s,
        greedy_decode_tok_s: greedy.decode_tok_s,
        ratio: run.decode_tok_s / greedy.decode_tok_s,
        sampled_dispatches_per_token: run.dispatches_per_token,
        greedy_dispatches_per_token: greedy.dispatches_per_token,
        steps_per_submit: run.steps_per_submit,
      });
    }));

  it('megakernel switch: shows its check result, and greedy output stays identical', { timeout: 5 * 60_000 }, (t) =>
    guard(t, shared.session, async () => {
      const { page } = shared.session;
      await waitState(page, 'loaded');
      // A click, not check(): the page may keep the box unticked until the check has passed.
      await page.click('#megakernel', { timeout: 30_000 });
      const result = page.locator('#megakernel-result[data-passed]');
      await result.waitFor({ timeout: 120_000 });
      const passed = await result.getAttribute('data-passed');
      const detail = await text(page, '#megakernel-result');
      assert.equal(passed, 'true', `the megakernel check failed: ${detail}`);
      assert.ok(/\d/.test(detail), `the check result shows its numbers (max |Δ|): "${detail}"`);
      const ffn = await page.$eval('#plan-steps [data-step="ffn"] dd', (d) => d.textContent);
      assert.match(ffn, /megakernel/, `the plan in the model details follows the switch: "${ffn}"`);
      const run = await generate(page, { prompt: PROMPT, fields: { ...GREEDY, 'max-tokens': SHORT } });
      const want = native.ids.slice(0, SHORT);
      const at = firstDifference(run.ids, want);
      assert.equal(at, -1, `with the megakernel on, output differs at token ${at}: page ${JSON.stringify(run.ids)} native ${JSON.stringify(want)}`);
      assert.equal(await page.isChecked('#megakernel'), true, 'the switch shows on after a passed check');
      record('fixture megakernel', { check: detail, decode_tok_s: run.decode_tok_s });
      await page.click('#megakernel');
      await page.waitForFunction(() => !document.getElementById('megakernel').checked && document.getElementById('app').dataset.state === 'loaded', null, { timeout: 60_000 });
    }));

  it('share link round trip: every field restored, the same output reproduced', { timeout: 8 * 60_000 }, async (t) => {
    const { page, context } = shared.session;
    // Sampled (not greedy) so the seed matters: same seed, same GPU path, same output.
    const fields = {
      temperature: '0.8',
      'top-k': '20',
      'top-p': '0.9',
      'min-p': '0.02',
      'repeat-penalty': '1.05',
      seed: '1234',
      'max-tokens': '6',
    };
    const prompt = 'The little robot said: "hello & <goodbye>"\nand then';
    let link;
    let first;
    await guard(t, shared.session, async () => {
      await page.selectOption('#mode', 'complete');
      first = await generate(page, { prompt, fields });
      await page.click('#copy-link');
      await page.waitForFunction(() => document.getElementById('share-url')?.value.includes('?'), null, { timeout: 10_000 });
      link = await page.inputValue('#share-url');
      const params = new URL(link).searchParams;
      assert.equal(params.get('prompt'), prompt, 'the link carries the prompt');
      assert.equal(params.get('seed'), '1234');
      assert.ok(params.get('model')?.includes('llama-spm-q4_0.gguf'), `the link carries the model URL: ${link}`);
    });

    const second = await context.newPage();
    await guard(
      t,
      shared.session,
      async () => {
        await second.goto(link);
        // A non-default model from a link asks first; the fixture is cached, so no download follows.
        await settleLoad(second, { until: ['loaded'] });
        const restored = {};
        for (const id of Object.keys(fields)) restored[id] = await second.inputValue(`#${id}`);
        assert.deepEqual(restored, fields, 'every sampling field restored from the link');
        assert.equal(await second.inputValue('#prompt'), prompt, 'prompt restored as text');
        assert.equal(await second.inputValue('#mode'), 'complete', 'mode restored');
        assert.equal(await second.isChecked('#megakernel'), false, 'megakernel switch restored (off)');

        // The link runs by itself after loading; if it doesn't, run it to still check the output.
        let autoRan = true;
        const run = await finishedRun(second, { timeout: 60_000 }).catch(async () => {
          autoRan = false;
          return generate(second, {});
        });
        assert.deepEqual(run.ids, first.ids, `the link reproduces the output:\n  first ${JSON.stringify(first.text)}\n  link  ${JSON.stringify(run.text)}`);
        assert.ok(autoRan, 'opening the link did not start the run by itself after loading (a share link reproduces its run)');
      },
      second,
    );
    await second.close();
  });

  it('device lost mid-generation: state "lost", a message, #recover works without a reload', { timeout: 8 * 60_000 }, (t) =>
    guard(t, shared.session, async () => {
      const { page } = shared.session;
      await waitState(page, 'loaded');
      await page.fill('#prompt', PROMPT);
      for (const [id, v] of Object.entries({ ...GREEDY, 'max-tokens': '400' })) await page.fill(`#${id}`, v);
      // A marker that survives only if the page is not reloaded.
      await page.evaluate(() => (window.__sameDocument = true));
      await page.click('#send');
      await waitState(page, 'generating', { timeout: 30_000 });
      await page.waitForFunction(() => (document.getElementById('output')?.textContent ?? '').length > 0, null, { timeout: 60_000 });
      await page.evaluate(() => window.cocoPage.engine.destroy_device());
      await waitState(page, 'lost', { timeout: 60_000, what: 'after destroy_device()' });
      const message = await text(page, '#error');
      assert.ok(message.length > 10, `a device-lost message is shown (got "${message}")`);
      assert.ok(await page.isVisible('#recover'), '#recover is visible');
      const t0 = Date.now();
      await page.click('#recover');
      await settleLoad(page, { until: ['loaded'] });
      const recoverSeconds = (Date.now() - t0) / 1000;
      assert.equal(await page.evaluate(() => window.__sameDocument), true, 'recovered without a page reload');
      const run = await generate(page, { prompt: PROMPT, fields: { ...GREEDY, 'max-tokens': SHORT } });
      assert.deepEqual(run.ids, native.ids.slice(0, SHORT), 'after recovery, greedy output equals native again');
      record('fixture device lost', { message, recover_seconds: recoverSeconds });
    }));
});

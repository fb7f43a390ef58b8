// The page's measuring and housekeeping: the in-page benchmark (button and ?bench=1) and
// its JSON export against native `coco bench --json`, the per-kernel chart (SwiftShader
// offers timestamp-query; with it hidden the page must say so), the cache list and its
// delete, and the themes at phone width. Real browser, SwiftShader WebGPU, the fixture
// GGUF from scripts/fixtures.sh. Sizes stay tiny: SwiftShader decodes it at a few tok/s.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import {
  ARTIFACTS, GREEDY, ROOT, cachedUrls, generate, guard, loadModel, openPage, record, settleLoad,
  storageReport, text, useTestServer, waitState, withBrowser,
} from './lib/harness.mjs';
import { coco } from './lib/native.mjs';

const FIXTURE = 'tests/fixtures/llama-spm-chatml-q4_0.gguf';
const FIXTURE_URL = 'fixtures/llama-spm-chatml-q4_0.gguf';
const BENCH = { pp: 4, tg: 2, reps: 1 };
const PHONE = { width: 390, height: 844 };
const PHONE_SHOT = path.join(ARTIFACTS, 'page-phone.png');
const PHONE_SHOT_DARK = path.join(ARTIFACTS, 'page-phone-dark.png');

/** Dotted paths of every key in nested plain objects (arrays and values are leaves). */
function keyPaths(value, prefix = '') {
  if (!value || typeof value !== 'object' || Array.isArray(value)) return [];
  return Object.keys(value).flatMap((k) => [prefix + k, ...keyPaths(value[k], `${prefix}${k}.`)]).sort();
}

/** Fills the benchmark's size inputs. */
async function setBenchSizes(page, sizes) {
  for (const [key, value] of Object.entries(sizes)) await page.fill(`#bench-${key}`, String(value));
}

/**
 * Waits until #bench-result shows a finished benchmark and returns the result behind it
 * (the page shows a table for people; the JSON is what Export saves). The table's medians
 * must be the result's.
 */
async function benchResult(page) {
  await page.waitForFunction(() => ['done', 'failed'].includes(document.getElementById('bench-result')?.dataset.state), null, { timeout: 300_000, polling: 250 });
  const shown = await text(page, '#bench-result');
  assert.equal(await page.getAttribute('#bench-result', 'data-state'), 'done', `the benchmark finished: ${shown}`);
  assert.ok(!shown.includes('{'), `the page shows a table, not JSON: ${shown.slice(0, 200)}`);
  const result = await page.evaluate(() => window.cocoPage.benchResult);
  const medians = await page.$$eval('#bench-result td[data-median]', (tds) => tds.map((td) => Number(td.dataset.median)));
  assert.deepEqual(medians, [result.pp_tok_s, result.tg_tok_s, result.tg_sampled_tok_s], 'the table shows the medians of the result');
  return result;
}

function checkBench(result, sizes, what) {
  assert.equal(result.prompt_tokens, sizes.pp, `${what}: pp size`);
  assert.equal(result.gen_tokens, sizes.tg, `${what}: tg size`);
  assert.equal(result.reps, sizes.reps, `${what}: reps`);
  // As llama-bench: tg from an empty cache (its first draw's one token), not after the prompt.
  assert.equal(result.depth, 0, `${what}: depth`);
  assert.deepEqual(result.tg_positions, [1, sizes.tg], `${what}: tg's positions`);
  assert.equal(result.pp_runs.length, sizes.reps, `${what}: one pp figure per run`);
  assert.ok(result.pp_tok_s > 0 && result.tg_tok_s > 0, `${what}: measured speeds (pp ${result.pp_tok_s}, tg ${result.tg_tok_s})`);
  assert.ok(result.dispatches_per_token > 0, `${what}: dispatches per token`);
}

describe('page: benchmark, kernel chart, cache', { timeout: 20 * 60_000 }, () => {
  let native; // `coco bench --json` on lavapipe, same file and sizes
  const shared = useTestServer({
    sharedBrowser: true,
    whileLaunching: async () => {
      native = await coco(['bench', '-m', FIXTURE, '-p', String(BENCH.pp), '-n', String(BENCH.tg), '--reps', String(BENCH.reps), '--json']);
    },
  });

  it('benchmark button: the result is shown, and the exported JSON has the fields of `coco bench --json`', { timeout: 5 * 60_000 }, (t) =>
    guard(t, shared.session, async () => {
      const { page } = shared.session;
      await openPage(page, shared.server);
      await loadModel(page, FIXTURE_URL);
      assert.equal(await page.isDisabled('#bench-export'), true, 'nothing to export before a benchmark ran');
      await setBenchSizes(page, BENCH);
      await page.click('#bench-run');
      const shown = await benchResult(page);
      checkBench(shown, BENCH, 'button');
      assert.match(await text(page, '#bench-result'), /The next run here gets bars/, 'a first run has nothing to compare with');
      assert.equal(await page.locator('#bench-result .vs-bar').count(), 0, 'no bars without a last run');
      assert.match(await text(page, '#status-text'), /Benchmark: prefill .* decode /, 'the status line sums it up');

      const [download] = await Promise.all([page.waitForEvent('download', { timeout: 30_000 }), page.click('#bench-export')]);
      assert.match(download.suggestedFilename(), /^coco-bench-llama-spm-chatml-q4_0-.*\.json$/);
      const exported = JSON.parse(fs.readFileSync(await download.path(), 'utf8'));
      assert.deepEqual(exported, shown, 'the export is the result shown');
      assert.deepEqual(keyPaths(exported), keyPaths(native), 'the same fields as native `coco bench --json`');
      assert.match(exported.adapter, /swiftshader.*\(BrowserWebGpu, Cpu\)/i, 'the export names the GPU it measured, as the browser calls it');
      checkBench(native, BENCH, 'native');

      // The same sizes again: each figure gets a bar against the run before.
      await page.click('#bench-run');
      const again = await benchResult(page);
      assert.equal(await page.locator('#bench-result .vs-bar').count(), 3, 'a bar per figure against the last run');
      const pct = Math.round((again.tg_tok_s / shown.tg_tok_s - 1) * 100);
      assert.match(await text(page, '#bench-result tr[data-figure^="Decode, greedy"] td.vs'), new RegExp(`${pct >= 0 ? '\\+' : ''}${pct}%`), 'the decode bar says by how much');
      // The page's host time per dispatch (recording, and encoding: the calls into WebGPU), the
      // browser's share of a decode step that the GPU does not bound.
      const hostUs = (r) => (r.record_ms_per_token * 1e3) / r.dispatches_per_token;
      record('page bench', { pp_tok_s: shown.pp_tok_s, tg_tok_s: shown.tg_tok_s, tg_sampled_tok_s: shown.tg_sampled_tok_s, sampled_vs_greedy: shown.sampled_vs_greedy, native_pp_tok_s: native.pp_tok_s, native_tg_tok_s: native.tg_tok_s, host_us_per_dispatch: hostUs(shown), native_host_us_per_dispatch: hostUs(native), adapter: shown.adapter });
    }));

  it('?bench=1 runs the benchmark right after the link loads its model, with the link\'s sizes', { timeout: 5 * 60_000 }, async (t) => {
    const { context } = shared.session;
    const sizes = { pp: 3, tg: 2, reps: 1 };
    // attn_blocked=1: an A/B switch a link carries to the engine (its bench record says so).
    const q = new URLSearchParams({ model: FIXTURE_URL, mode: 'complete', prompt: '', bench: '1', bench_pp: String(sizes.pp), bench_tg: String(sizes.tg), bench_reps: String(sizes.reps), attn_blocked: '1' });
    const linked = await context.newPage();
    await guard(
      t,
      shared.session,
      async () => {
        await linked.goto(`${shared.server.url}/?${q}`);
        // The fixture is not the default model, so the link asks first (no download: cached).
        await settleLoad(linked, { until: ['loaded'] });
        for (const [key, value] of Object.entries(sizes)) assert.equal(await linked.inputValue(`#bench-${key}`), String(value), `bench_${key} restored`);
        const result = await benchResult(linked);
        checkBench(result, sizes, '?bench=1');
        assert.equal(result.kernels.attention_blocked, true, 'the link\'s attn_blocked=1 reached the engine');
        assert.match(await text(linked, '#bench-result'), /other sizes: not compared/, 'other sizes than the last run: no bars');
        assert.equal(await linked.isDisabled('#bench-export'), false, 'the result can be exported');
        await waitState(linked, 'loaded');
      },
      linked,
    );
    await linked.close();
  });

  it('per-kernel chart: SwiftShader offers timestamp-query, so a decode step and a prefill step are drawn kernel by kernel', { timeout: 5 * 60_000 }, (t) =>
    guard(t, shared.session, async () => {
      const { page } = shared.session;
      await waitState(page, 'loaded');
      const adapter = await page.evaluate(() => window.cocoPage.engine.adapter());
      record('page adapter', { timestamp_query: adapter.timestamp_query, shader_f16: adapter.shader_f16, fallback: adapter.fallback });
      // TOOLCHAIN.md measured timestamp-query on this SwiftShader; the other case (no
      // timestamp-query) is the next test, with the feature hidden.
      assert.equal(adapter.timestamp_query, true, 'SwiftShader offers timestamp-query (TOOLCHAIN.md)');
      await page.click('#profile-run');
      await page.waitForFunction(() => {
        const chart = document.getElementById('profile-chart');
        return chart.querySelector('svg g[data-label]') || chart.querySelector('[data-status]');
      }, null, { timeout: 240_000, polling: 250 });
      const bars = await page.$$eval('#profile-chart svg g[data-label]', (gs) => gs.map((g) => ({ label: g.dataset.label, us: Number(g.dataset.us), width: Number(g.querySelector('rect').getAttribute('width')), value: g.querySelector('.chart-value').textContent })));
      assert.ok(bars.length >= 3, `a bar per kernel (got ${JSON.stringify(bars)}; chart says "${await text(page, '#profile-chart')}")`);
      for (const b of bars) assert.ok(b.us > 0 && b.width > 0, `kernel ${b.label} has a measured time and a bar`);
      assert.ok(bars.some((b) => b.label.startsWith('matmul_')), 'the matmul kernels are named');
      // A decode step's products and attention count their bytes (gpu::Work): their bars say
      // the rate they read at; the element-wise kernels count none and say none.
      for (const b of bars) {
        const counted = /^(matmul_|attention_(tiled|split))/.test(b.label);
        const rate = b.value.match(/· ([\d.e+-]+) GB\/s$/);
        if (counted) assert.ok(rate && Number(rate[1]) > 0, `${b.label} shows its read rate: "${b.value}"`);
        else assert.doesNotMatch(b.value, /GB\/s|TFLOP/, `${b.label} counts no bytes`);
      }
      assert.ok(bars.every((b, i) => i === 0 || b.us <= bars[i - 1].us), 'longest first');
      const note = await text(page, '#profile-chart p');
      assert.match(note, /One decode step at position \d+ .* \d+ dispatches/, `the chart says what was timed: "${note}"`);
      record('page profile', { kernels: bars.length, top: bars[0].label, top_ms: bars[0].us / 1000 });
      // The prefill step of a chat turn's prompt, kernel by kernel: its products are many
      // tokens' work, so their bars say TFLOP/s (the LM head, the last token's alone, may say
      // GB/s).
      await page.click('#profile-prefill-run');
      await page.waitForFunction(() => /One prefill step/.test(document.querySelector('#profile-chart p')?.textContent ?? '')
        || document.querySelector('#profile-chart [data-status]'), null, { timeout: 240_000, polling: 250 });
      const prefillNote = await text(page, '#profile-chart p');
      assert.match(prefillNote, /One prefill step of 64 tokens .* \d+ dispatches/, `the chart says what was timed: "${prefillNote}"`);
      const prefill = await page.$$eval('#profile-chart svg g[data-label]', (gs) => gs.map((g) => ({ label: g.dataset.label, value: g.querySelector('.chart-value').textContent })));
      const products = prefill.filter((b) => b.label.startsWith('matmul_'));
      const arithmetic = products.filter((b) => /· [\d.e+-]+ TFLOP\/s$/.test(b.value));
      assert.ok(arithmetic.length >= 2 && arithmetic.length >= products.length - 1,
        `the prefill's products show their arithmetic rate: ${JSON.stringify(prefill)}`);
      record('page prefill profile', { kernels: prefill.length, top: prefill[0].label });
      // The ceiling those rates are held against: the GPU's f32 FMA rate, measured in the
      // page as `coco probe --compute-only` does natively (no cooperative matrices on the web).
      const probe = await page.evaluate(() => window.cocoPage.engine.probe());
      assert.ok(probe.fma_tflops > 0 && Number.isFinite(probe.fma_tflops), JSON.stringify(probe));
      assert.equal(probe.coop_tflops, null);
      assert.equal(probe.coop_wg_loads_tflops, null);
      record('page compute probe', probe);
    }));

  it('cache list: the loaded model with its size; Delete removes the Cache API entries and the list updates', { timeout: 5 * 60_000 }, (t) =>
    guard(t, shared.session, async () => {
      const { page } = shared.session;
      await waitState(page, 'loaded');
      const absolute = new URL(FIXTURE_URL, `${shared.server.url}/`).href;
      const item = page.locator(`#cache-list li[data-url="${absolute}"]`);
      await item.waitFor({ timeout: 10_000 }).catch(async (err) => {
        throw new Error(`the cache list shows no entry for the loaded model (${await storageReport(page)})`, { cause: err });
      });
      const bytes = fs.statSync(path.join(ROOT, FIXTURE)).size;
      // formatBytes: decimal units, one decimal from 10 MB up.
      const size = `${(bytes / 1e6).toFixed(1)} MB`;
      assert.equal(await item.locator('.cache-size').textContent(), size, 'the entry shows the file size');
      assert.match(await item.locator('.cache-name').textContent(), /llama-spm-chatml-q4_0\.gguf/);
      const before = await cachedUrls(page);
      assert.ok(before.includes(`coco-models-v1 ${absolute}`) && before.includes(`coco-models-meta-v1 ${absolute}`), `file and meta entries are cached: ${before.join(', ')}`);

      await item.getByRole('button', { name: /delete/i }).click();
      await item.waitFor({ state: 'detached', timeout: 10_000 });
      const after = await cachedUrls(page);
      assert.deepEqual(after.filter((u) => u.endsWith(absolute)), [], `no Cache API entry is left for the model: ${after.join(', ')}`);
      assert.match(await text(page, '#cache-list'), /Nothing kept yet/, 'the list says it is empty');
      await page.waitForFunction(() => /^0 models/.test(document.getElementById('cache-usage').textContent), null, { timeout: 10_000 });

      // Really gone: the next load reads the file over the network again (a load from the
      // cache makes no request for it at all), and keeps it again.
      const seen = shared.session.requests.length;
      await loadModel(page, FIXTURE_URL);
      const fetched = shared.session.requests.slice(seen).filter((r) => r.url === absolute && r.method === 'GET');
      assert.ok(fetched.length >= 1, `the model was downloaded again: ${JSON.stringify(shared.session.requests.slice(seen))}`);
      await item.waitFor({ timeout: 10_000 }).catch(async (err) => {
        throw new Error(`the cache list shows no entry for the loaded model (${await storageReport(page)})`, { cause: err });
      });
    }));
});

describe('page: per-kernel timing without timestamp-query', { timeout: 5 * 60_000 }, () => {
  const shared = useTestServer();

  // Hides the feature the way an adapter without it looks to the page and to the engine's
  // worker, where wgpu runs: GPUAdapter.features lacks "timestamp-query", so wgpu neither
  // reports nor requests it. Everything else is the real SwiftShader adapter.
  const hideTimestamps = () => {
    const real = Object.getOwnPropertyDescriptor(GPUAdapter.prototype, 'features');
    Object.defineProperty(GPUAdapter.prototype, 'features', {
      configurable: true,
      get() {
        return new Set([...real.get.call(this)].filter((f) => f !== 'timestamp-query'));
      },
    });
  };

  it('the page says plainly that kernels can\'t be timed here, and why (no blank chart)', { timeout: 4 * 60_000 }, (t) =>
    withBrowser(t, { server: shared.server, initScript: hideTimestamps, workerInitScript: hideTimestamps }, async (session) => {
      const { page } = session;
      await openPage(page, shared.server);
      assert.equal(await page.evaluate(async () => (await window.cocoPage.engine.adapter()).timestamp_query), false, 'the engine sees no timestamp-query');
      assert.match(await text(page, '#profile-chart'), /not yet.*no timestamp quer/i, 'the chart area says why before anything loads');
      assert.match(await text(page, '#gpu-facts'), /Timestamp queries\s*no/i, 'the GPU panel says so too');
      await loadModel(page, FIXTURE_URL);
      assert.match(await text(page, '#profile-chart'), /not yet.*no timestamp quer/i, 'still said after loading a model');
      // Asking anyway gets the engine's own refusal, not an empty chart.
      await page.click('#profile-run');
      await page.locator('#profile-chart [data-status]').waitFor({ timeout: 60_000 });
      assert.equal(await page.getAttribute('#profile-chart [data-status]', 'data-status'), 'not_yet');
      assert.match(await text(page, '#profile-chart'), /not yet.*timestamp-query/i);
      assert.equal(await page.locator('#profile-chart svg').count(), 0, 'no chart is drawn');
    }));
});

describe('page: themes and phone width', { timeout: 8 * 60_000 }, () => {
  const shared = useTestServer();

  it(`at ${PHONE.width}px nothing overflows, the main controls are on screen, and the theme switch changes the colours`, { timeout: 6 * 60_000 }, (t) =>
    withBrowser(t, { server: shared.server, viewport: PHONE }, async (session) => {
      const { page } = session;
      await openPage(page, shared.server);
      await loadModel(page, FIXTURE_URL);
      // Fill the page the way a visitor would: output, numbers, a benchmark, the kernel chart.
      await generate(page, { prompt: 'Once upon a time', fields: { ...GREEDY, 'max-tokens': 2 } });
      await setBenchSizes(page, { pp: 2, tg: 1, reps: 1 });
      await page.click('#bench-run');
      await benchResult(page);
      await page.click('#profile-run');
      await page.locator('#profile-chart svg, #profile-chart [data-status]').first().waitFor({ timeout: 240_000 });
      await waitState(page, 'loaded');

      const overflow = () => page.evaluate((w) => {
        const wide = [...document.querySelectorAll('#app *')]
          .filter((e) => e.getBoundingClientRect().right > w + 0.5 && !e.closest('.chart, .table-wrap, .visually-hidden'))
          .map((e) => e.id || e.className || e.tagName);
        return { scrollWidth: document.scrollingElement.scrollWidth, wide: wide.slice(0, 10) };
      }, PHONE.width);
      const phone = await overflow();
      assert.ok(phone.scrollWidth <= PHONE.width, `no horizontal overflow at ${PHONE.width}px: scrollWidth ${phone.scrollWidth}, too wide: ${phone.wide.join(', ')}`);
      for (const id of ['model-url', 'load', 'mode', 'prompt', 'send', 'stop', 'theme', 'bench-run', 'copy-link']) {
        const box = await page.locator(`#${id}`).boundingBox();
        assert.ok(box && (await page.isVisible(`#${id}`)), `#${id} is visible`);
        assert.ok(box.x >= 0 && box.x + box.width <= PHONE.width, `#${id} lies within the screen's width (${box.x}…${box.x + box.width})`);
      }

      // Themes: the page starts in the system's (light here); the switch flips the colours.
      const colours = () => page.evaluate(() => {
        const body = getComputedStyle(document.body);
        const panel = getComputedStyle(document.querySelector('.panel'));
        return { theme: document.documentElement.dataset.theme ?? null, bg: body.backgroundColor, text: body.color, panel: panel.backgroundColor, button: document.getElementById('theme').textContent };
      });
      const light = await colours();
      await page.screenshot({ path: PHONE_SHOT, fullPage: true });
      await page.click('#theme');
      const dark = await colours();
      assert.equal(dark.theme, 'dark');
      assert.notEqual(dark.bg, light.bg, 'the background changes');
      assert.notEqual(dark.text, light.text, 'the text colour changes');
      assert.notEqual(dark.panel, light.panel, 'the panels change');
      assert.notEqual(dark.button, light.button, 'the switch says what it does next');
      const luminance = (rgb) => {
        const [r, g, b] = rgb.match(/\d+/g).map(Number);
        return 0.2126 * r + 0.7152 * g + 0.0722 * b;
      };
      assert.ok(luminance(dark.bg) < luminance(light.bg), `dark is darker: ${dark.bg} vs ${light.bg}`);
      assert.ok(luminance(dark.text) > luminance(dark.bg), 'light text on the dark background');
      assert.ok((await overflow()).scrollWidth <= PHONE.width, 'still no overflow in the dark theme');
      await page.screenshot({ path: PHONE_SHOT_DARK, fullPage: true });
      // The choice is remembered: a reload keeps it.
      await page.reload();
      await waitState(page, ['ready', 'loaded'], { timeout: 60_000 });
      assert.equal((await colours()).bg, dark.bg, 'the theme survives a reload');
      await page.click('#theme');
      assert.deepEqual((await colours()).bg, light.bg, 'and switches back');
      // Without a stored choice the page follows the system preference, live.
      await page.evaluate(() => localStorage.removeItem('coco-theme'));
      await page.emulateMedia({ colorScheme: 'dark' });
      await page.reload();
      await waitState(page, ['ready', 'loaded'], { timeout: 60_000 });
      assert.equal((await colours()).bg, dark.bg, 'a system in dark mode gets the dark theme');
      await page.emulateMedia({ colorScheme: 'light' });
      // The page hears the change as a media-query event, a task after emulateMedia returns.
      await page.waitForFunction(() => document.documentElement.dataset.theme === 'light', null, { timeout: 10_000 });
      assert.equal((await colours()).bg, light.bg, 'and follows the system back to light without a reload');
      console.log(`# screenshots at phone width: ${path.relative(ROOT, PHONE_SHOT)}, ${path.relative(ROOT, PHONE_SHOT_DARK)}`);
    }));
});

// The e2e harness: the test server on free ports, Debian Chromium headless with SwiftShader
// WebGPU (flags measured in ../shared/TOOLCHAIN.md), a fresh profile per browser, and
// helpers that drive the page through the DOM hooks in www/API.md. Every failure carries
// the page's state, #error text and console log, because a bare "timeout" from a GPU page
// says nothing.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before } from 'node:test';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { createServer } from '../../../scripts/serve.mjs';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
// COCO_E2E_DIST points the tests at a page built elsewhere.
export const DIST = path.resolve(ROOT, process.env.COCO_E2E_DIST ?? 'dist');
export const MODELS = path.join(ROOT, 'models');
export const FIXTURES = path.join(ROOT, 'tests/fixtures');
// Everything a run leaves behind (screenshots, generated files, timings) goes here.
export const ARTIFACTS = path.join(ROOT, 'target/e2e');
export const GENERATED = path.join(ARTIFACTS, 'generated');
export const CHROMIUM = process.env.COCO_CHROMIUM ?? '/usr/bin/chromium';
export const DEFAULT_MODEL = 'models/gemma-3-270m-q4_k_m.gguf';

// Everything TOOLCHAIN.md found necessary for a WebGPU adapter headless (Playwright adds
// the headless switch itself). Without --enable-unsafe-webgpu requestAdapter() is null.
const BASE_FLAGS = [
  '--no-sandbox',
  '--disable-gpu-sandbox',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
  '--disable-quic',
];
const WEBGPU_FLAG = '--enable-unsafe-webgpu';

/** Fails early, with the fix, when the page or the browser is missing. */
export function checkPrerequisites() {
  if (!fs.existsSync(path.join(DIST, 'index.html'))) {
    throw new Error(
      'dist/index.html is missing: build the page first with\n' +
        '  TRUNK_SKIP_VERSION_CHECK=true PATH=$PWD/node_modules/.bin:$PATH trunk build --release\n' +
        '(bash scripts/test.sh does this before the e2e tests)',
    );
  }
  if (!fs.existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get install -y chromium`);
  fs.mkdirSync(GENERATED, { recursive: true });
}

/**
 * Starts the test server with fault injection and the cross-origin listener, both on free
 * ports. /fixtures/ serves tests/fixtures, /gen/ what the tests write into target/e2e/generated.
 */
export async function startServer() {
  checkPrerequisites();
  const log = [];
  const server = await createServer({
    port: 0,
    dist: DIST,
    models: MODELS,
    fixtures: FIXTURES,
    roots: { '/gen/': GENERATED },
    faults: true,
    log: (line) => log.push(line),
  });
  server.log = log;
  return server;
}

/**
 * A fresh Chromium with its own profile (the Cache API needs a real, persistent profile: an
 * incognito-style context gets a small in-memory quota). `initScript` runs in the page before
 * its scripts, `workerInitScript` in the engine's worker before its own. Pass `userDataDir` to reopen a
 * profile, e.g. to load a model from the cache in a new browser (and `keepProfile` to keep a
 * new one after close); `server` (from startServer)
 * adds its request log to failure messages.
 * Returns {context, page, logs, requests, userDataDir, close()}.
 */
export async function launch({ webgpu = true, userDataDir, keepProfile = false, initScript, workerInitScript, server, viewport = { width: 1280, height: 1000 } } = {}) {
  const dir = userDataDir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'coco-e2e-'));
  const context = await chromium.launchPersistentContext(dir, {
    executablePath: CHROMIUM,
    headless: true,
    args: webgpu ? [WEBGPU_FLAG, ...BASE_FLAGS] : BASE_FLAGS,
    viewport,
    // #copy-link writes the share link to the clipboard too.
    permissions: ['clipboard-read', 'clipboard-write'],
  });
  if (initScript) await context.addInitScript(initScript);
  if (workerInitScript) {
    // addInitScript reaches the page's frames, not its workers: the engine's worker
    // (www/engine_worker.js) gets the function prepended to its own source instead, so it
    // runs there before anything else.
    await context.route('**/www/engine_worker.js', async (route) => {
      const response = await route.fetch();
      await route.fulfill({ response, body: `(${workerInitScript})();\n${await response.text()}` });
    });
  }
  const page = context.pages()[0] ?? (await context.newPage());
  const session = { context, page, server, userDataDir: dir, logs: [], requests: [] };
  watch(page, session);
  context.on('page', (p) => watch(p, session));
  session.close = async () => {
    await context.close().catch(() => {});
    // A profile holds the cached models (up to 253 MB): remove the ones made here.
    if (!userDataDir && !keepProfile) fs.rmSync(dir, { recursive: true, force: true });
  };
  return session;
}

/**
 * The setup most suites share, registered as before()/after() hooks on the enclosing
 * describe(): the test server, and with `sharedBrowser` one Chromium (launch() with that
 * server) that the suite's tests use in turn. after() closes both whatever happened, even when
 * before() failed halfway. Returns the object the hooks fill in, `{ server, session }`: read
 * its fields inside tests and hooks, since they are empty until before() has run.
 *
 * `whileLaunching(server)` starts slow work (a native `coco` run) once the server is up and is
 * awaited after the browser has launched, so the two overlap instead of adding up.
 *
 * node:test runs hooks in the order they are registered, so a suite registers its own
 * before()/after() after this call to use the server and the browser, or before it for checks
 * that should fail before anything starts.
 */
export function useTestServer({ sharedBrowser = false, whileLaunching } = {}) {
  const shared = {};
  before(async () => {
    shared.server = await startServer();
    const work = whileLaunching?.(shared.server);
    if (sharedBrowser) shared.session = await launch({ server: shared.server });
    await work;
  });
  after(async () => {
    await shared.session?.close();
    await shared.server?.close();
  });
  return shared;
}

const t0 = Date.now();
function stamp() {
  return `${((Date.now() - t0) / 1000).toFixed(1)}s`;
}

// Console, page errors and network, per page, for failure messages and request checks.
function watch(page, session) {
  page.on('console', (m) => session.logs.push(`${stamp()} console.${m.type()}: ${m.text()}`));
  page.on('pageerror', (e) => session.logs.push(`${stamp()} pageerror: ${e.stack ?? e.message}`));
  page.on('crash', () => session.logs.push(`${stamp()} the page crashed`));
  page.on('request', (r) => session.requests.push({ url: r.url(), method: r.method(), range: r.headers().range ?? null }));
  page.on('requestfailed', (r) => session.logs.push(`${stamp()} requestfailed: ${r.method()} ${r.url()} ${r.failure()?.errorText}`));
}

/** What the page says about itself: state, #error, status line and the console log tail. */
export async function diagnose(session, page = session.page) {
  let facts = '(page unavailable)';
  try {
    facts = await page.evaluate(() => {
      const text = (id) => document.getElementById(id)?.textContent?.trim() || '';
      return JSON.stringify(
        {
          url: location.href,
          state: document.getElementById('app')?.dataset.state ?? '(no #app)',
          error: text('error'),
          status: text('status-text'),
          progress: text('progress-text'),
          report: [...document.querySelectorAll('#report tr[data-status]')].map((r) => `${r.dataset.status}: ${r.textContent.replace(/\s+/g, ' ').trim()}`),
        },
        null,
        2,
      );
    });
  } catch (e) {
    facts = `(page unavailable: ${e.message})`;
  }
  const tail = session.logs.slice(-80).join('\n');
  let out = `page: ${facts}\nconsole (last ${Math.min(80, session.logs.length)} of ${session.logs.length}):\n${tail}`;
  // The server's side of the story, when the test told the session which server it uses.
  if (session.server?.log) out += `\nserver (last 30 requests):\n${session.server.log.slice(-30).join('\n')}`;
  return out;
}

/**
 * Runs `body()` and, on failure, adds the page's diagnosis to the error and saves a
 * screenshot under target/e2e/failures/<test name>.png.
 */
export async function guard(t, session, body, page = session.page) {
  try {
    return await body();
  } catch (err) {
    const name = (t?.name ?? 'test').replace(/[^a-z0-9]+/gi, '-').slice(0, 80);
    const shot = path.join(ARTIFACTS, 'failures', `${name}.png`);
    fs.mkdirSync(path.dirname(shot), { recursive: true });
    await page.screenshot({ path: shot, fullPage: true, timeout: 10_000 }).catch(() => {});
    err.message += `\n\n${await diagnose(session, page)}\nscreenshot: ${path.relative(ROOT, shot)}`;
    throw err;
  }
}

/** Runs `body(session)` in a fresh browser that is closed whatever happens. */
export async function withBrowser(t, options, body) {
  if (typeof options === 'function') [options, body] = [{}, options];
  const session = await launch(options);
  try {
    return await guard(t, session, () => body(session));
  } finally {
    await session.close();
  }
}

export async function state(page) {
  return page.evaluate(() => document.getElementById('app')?.dataset.state ?? null);
}

// States the page can't leave by itself: waiting for something else there is pointless.
const TERMINAL = ['error', 'not-yet', 'no-webgpu', 'lost'];

/**
 * Waits until #app[data-state] is one of `wanted`. Fails at once (instead of at the
 * timeout) when the page lands in a terminal state that wasn't asked for.
 */
export async function waitState(page, wanted, { timeout = 120_000, what } = {}) {
  const want = [wanted].flat();
  const handle = await page
    .waitForFunction(
      ([want, terminal]) => {
        const s = document.getElementById('app')?.dataset.state;
        return want.includes(s) || terminal.includes(s) ? s : false;
      },
      [want, TERMINAL],
      { timeout, polling: 100 },
    )
    .catch(async (e) => {
      throw new Error(`waiting for state ${want.join('|')}${what ? ` (${what})` : ''}: ${e.message.split('\n')[0]}; state is ${await state(page)}`);
    });
  const got = await handle.jsonValue();
  if (!want.includes(got)) {
    throw new Error(`expected state ${want.join('|')}${what ? ` (${what})` : ''}, page went to "${got}": ${await text(page, '#error')}`);
  }
  return got;
}

export async function text(page, selector) {
  return (await page.locator(selector).first().textContent().catch(() => ''))?.trim() ?? '';
}

/** Opens the page (optionally with a query string) and waits until the engine is up. */
export async function openPage(page, server, query = '', { wanted = ['ready', 'confirm', 'loaded', 'downloading', 'inspecting'] } = {}) {
  await page.goto(`${server.url}/${query}`);
  return waitState(page, wanted, { timeout: 60_000, what: 'page start' });
}

/**
 * Loads a model through the URL box and the Load button, confirming when the page asks.
 * Resolves to the state it ends in (normally "loaded"); `until` can stop earlier.
 */
export async function loadModel(page, url, { until = ['loaded'], timeout = 300_000, confirm = true } = {}) {
  await page.fill('#model-url', url);
  await page.click('#load');
  return settleLoad(page, { until, timeout, confirm });
}

/** Waits for a load that has started; clicks #confirm-ok when the page asks for it. */
export async function settleLoad(page, { until = ['loaded'], timeout = 300_000, confirm = true } = {}) {
  const deadline = Date.now() + timeout;
  for (;;) {
    const s = await waitState(page, [...new Set([...until, 'confirm'])], { timeout: Math.max(1000, deadline - Date.now()), what: 'model load' });
    if (s !== 'confirm' || until.includes('confirm')) return s;
    if (!confirm) return s;
    await page.click('#confirm-ok');
    // The dialog closes and the download starts; wait for the state to move on.
    await page.waitForFunction(() => document.getElementById('app')?.dataset.state !== 'confirm', null, { timeout: 30_000 });
  }
}

export const GREEDY = { temperature: '0', 'top-k': '0', 'top-p': '1', 'min-p': '0', 'repeat-penalty': '1', seed: '42' };

/** Fills the sampling fields: {temperature, 'top-k', …, 'max-tokens'} as strings. */
export async function setFields(page, fields) {
  for (const [id, value] of Object.entries(fields)) await page.fill(`#${id}`, String(value));
}

/**
 * Generates with the given prompt and fields, waits for the run to finish and returns
 * window.cocoPage.lastStats (ids, text, tok/s …) plus the #output text.
 */
export async function generate(page, { prompt, fields = {}, timeout = 300_000 } = {}) {
  await waitState(page, 'loaded', { timeout: 60_000, what: 'before generating' });
  if (prompt !== undefined) await page.fill('#prompt', prompt);
  await setFields(page, fields);
  const before = await page.evaluate(() => (window.__cocoRuns = (window.__cocoRuns ?? 0) + 1));
  await page.evaluate((n) => {
    // Tag the current stats object so a new one can be told apart from it.
    const s = window.cocoPage?.lastStats;
    if (s && typeof s === 'object') s.__seen = n;
  }, before);
  await page.click('#send');
  return finishedRun(page, { timeout });
}

/** Waits until a generation started by someone (the page itself, a click) has finished. */
export async function finishedRun(page, { timeout = 300_000 } = {}) {
  await page
    .waitForFunction(
      () => {
        const app = document.getElementById('app')?.dataset.state;
        const s = window.cocoPage?.lastStats;
        if (['error', 'lost', 'not-yet'].includes(app)) return true;
        return app === 'loaded' && s && typeof s === 'object' && s.__seen === undefined && Array.isArray(s.ids);
      },
      null,
      { timeout, polling: 200 },
    )
    .catch(async (e) => {
      throw new Error(`generation did not finish: ${e.message.split('\n')[0]}; state ${await state(page)}`);
    });
  const s = await state(page);
  if (s !== 'loaded') throw new Error(`generation ended in state "${s}": ${await text(page, '#error')}`);
  const stats = await page.evaluate(() => {
    const { __seen, ...rest } = window.cocoPage.lastStats;
    return rest;
  });
  stats.output = await text(page, '#output');
  return stats;
}

/** URLs held in any Cache API cache of the page's origin. */
export async function cachedUrls(page) {
  return page.evaluate(async () => {
    const out = [];
    for (const name of await caches.keys()) {
      const cache = await caches.open(name);
      for (const req of await cache.keys()) out.push(`${name} ${req.url}`);
    }
    return out;
  });
}

/**
 * Why a model may be missing from the cache, for assertion messages: the page's status line
 * (it says "not kept in this browser (…)" when the browser refused the copy), the origin's
 * storage quota and usage, and the free space of the disk holding the browser profile.
 * Chromium grants Cache API storage only beyond a reserve it keeps free on that disk, so a
 * nearly full disk refuses every copy with a QuotaExceededError.
 */
export async function storageReport(page) {
  const { quota, usage, status } = await page.evaluate(async () => {
    const estimate = (await navigator.storage?.estimate?.()) ?? {};
    return { ...estimate, status: document.getElementById('status-text')?.textContent ?? '' };
  });
  const mb = (bytes) => (bytes === undefined ? '?' : `${(bytes / 1e6).toFixed(1)} MB`);
  let disk = '';
  try {
    const fsStats = fs.statfsSync(os.tmpdir());
    disk = `; ${os.tmpdir()} has ${((fsStats.bavail * fsStats.bsize) / 1e9).toFixed(1)} GB free`;
  } catch {
    // statfs is not on every platform; the quota already tells the story
  }
  return `page status ${JSON.stringify(status)}; storage quota ${mb(quota)}, used ${mb(usage)}${disk}`;
}

/** Appends one line to target/e2e/timings.jsonl and prints it: the run's measured numbers. */
export function record(name, values) {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  const line = JSON.stringify({ test: name, ...values });
  fs.appendFileSync(path.join(ARTIFACTS, 'timings.jsonl'), line + '\n');
  console.log(`# measured ${line}`);
}

/** The page's clock (performance.now(), ms): marks the start of a window for longTasksSince. */
export async function pageNow(page) {
  return page.evaluate(() => performance.now());
}

/**
 * The page's main-thread long tasks (over 50 ms, window.cocoPage.longTasks) that started at
 * or after `since` (a pageNow() mark): {count, longest_ms, total_ms, frames}. `frames` are the
 * long animation frames of the same window (window.cocoPage.longFrames), longest first, at
 * most three: each one's ms, its scripts' ms, its rendering's ms and its longest scripts
 * (entry point, file:function, ms). Recorded, never asserted on (durations on a shared 2-core
 * machine say nothing about a bug).
 */
export async function longTasksSince(page, since) {
  return page.evaluate((since) => {
    const tasks = (window.cocoPage?.longTasks ?? []).filter((t) => t.start >= since);
    const round = (ms) => Math.round(ms);
    const frames = (window.cocoPage?.longFrames ?? [])
      .filter((f) => f.start >= since)
      .sort((a, b) => b.duration - a.duration)
      .slice(0, 3)
      .map((f) => ({
        ms: round(f.duration),
        script_ms: round(f.script),
        render_ms: round(f.render),
        top: f.top.map((s) => `${s.invoker} ${s.source} ${round(s.duration)}`),
      }));
    return {
      count: tasks.length,
      longest_ms: round(tasks.reduce((a, t) => Math.max(a, t.duration), 0)),
      total_ms: round(tasks.reduce((a, t) => a + t.duration, 0)),
      frames,
    };
  }, since);
}

/** The first index where two id lists differ, or -1. */
export function firstDifference(a, b) {
  const n = Math.max(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return -1;
}

// Honest "not yet": an architecture coco doesn't run is refused from its header, before the
// weights download; and a browser without WebGPU (in the page, or in the Web Worker the
// engine runs in) gets the explanation, not a broken page.
import { describe, it, before } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { GENERATED, cachedUrls, loadModel, openPage, text, useTestServer, waitState, withBrowser } from './lib/harness.mjs';
import { mambaGguf, writeFile } from './lib/gguf.mjs';

describe('not yet', { timeout: 10 * 60_000 }, () => {
  const shared = useTestServer();
  before(() => {
    writeFile(path.join(GENERATED, 'mamba.gguf'), mambaGguf());
  });

  it('an unsupported architecture (mamba) is refused from its header, with the reason', { timeout: 3 * 60_000 }, (t) =>
    withBrowser(t, { server: shared.server }, async (session) => {
      const { page } = session;
      await openPage(page, shared.server);
      const s = await loadModel(page, 'gen/mamba.gguf', { until: ['not-yet', 'loaded'] });
      assert.equal(s, 'not-yet');
      const rows = await page.$$eval('#report tr[data-status]', (trs) => trs.map((r) => ({ status: r.dataset.status, text: r.textContent.replace(/\s+/g, ' ') })));
      const row = rows.find((r) => /not.?yet/.test(r.status));
      assert.ok(row, `a "not yet" row in the report (rows: ${JSON.stringify(rows)})`);
      assert.match(row.text, /mamba/, 'the row names the architecture');
      assert.match(row.text, /llama|qwen2|gemma3/, 'and says what is supported');
      const cached = await cachedUrls(page);
      assert.deepEqual(cached.filter((u) => u.includes('mamba')), [], 'nothing of a refused model is cached');
    }));

  // The f16 wide tiles by name on a browser without shader-f16 (CI's SwiftShader grants
  // none): the page says which setting, and that WebGPU itself works.
  it('gemm=4x8h without shader-f16: state error, naming the setting and the f32 tile', { timeout: 2 * 60_000 }, (t) =>
    withBrowser(t, { server: shared.server }, async (session) => {
      const { page } = session;
      const f16 = await page.evaluate(async () => Boolean((await navigator.gpu?.requestAdapter())?.features.has('shader-f16')));
      if (f16) {
        t.skip('this browser grants shader-f16: gemm=4x8h runs');
        return;
      }
      await page.goto(`${shared.server.url}/?gemm=4x8h`);
      await waitState(page, 'error', { timeout: 60_000 });
      assert.ok(await page.isHidden('#webgpu-missing'), 'not the "no WebGPU" panel');
      const shown = await text(page, '#error');
      assert.match(shown, /gemm=4x8h/, `the error names the link's setting: ${shown}`);
      assert.match(shown, /shader-f16/, 'and what the GPU lacks');
      assert.match(shown, /gemm=4x8 runs them in f32/, 'and what runs instead');
      assert.match(await text(page, '#status-text'), /gemm=/, 'the status line names the setting');
    }));

  it('WebGPU hidden from the page (navigator.gpu deleted): state no-webgpu and the explanation', { timeout: 2 * 60_000 }, (t) =>
    withBrowser(t, { server: shared.server, initScript: () => delete Navigator.prototype.gpu }, async (session) => {
      const { page } = session;
      await page.goto(`${shared.server.url}/`);
      await waitState(page, 'no-webgpu', { timeout: 60_000 });
      assert.ok(await page.isVisible('#webgpu-missing'), '#webgpu-missing is visible');
      assert.match(await text(page, '#webgpu-missing'), /Chrome|Firefox|Safari/, 'it says what to do in common browsers');
    }));

  // The engine runs in a module Web Worker (www/engine_worker.js): a browser that gives the
  // page WebGPU but not its workers, or that can't start a module worker, is told so plainly.
  it('WebGPU hidden from Web Workers only: state no-webgpu, and the page says the workers lack it', { timeout: 2 * 60_000 }, (t) =>
    withBrowser(t, { server: shared.server, workerInitScript: () => delete WorkerNavigator.prototype.gpu }, async (session) => {
      const { page } = session;
      await page.goto(`${shared.server.url}/`);
      await waitState(page, 'no-webgpu', { timeout: 60_000 });
      assert.ok(await page.isVisible('#webgpu-missing'), '#webgpu-missing is visible');
      assert.match(await text(page, '#webgpu-missing-reason'), /no WebGPU in Web Workers/, 'the reason names the workers');
      assert.match(await text(page, '#status-text'), /not yet.*Web Workers/i, 'the status line says it too');
    }));

  it('no module workers (the page\'s Worker ignores {type: "module"}): state no-webgpu, and the page says why', { timeout: 2 * 60_000 }, (t) =>
    withBrowser(t, { server: shared.server, initScript: () => {
      // What an older browser does: it never reads the `type` option.
      const Native = window.Worker;
      window.Worker = function Worker(url) {
        return new Native(url);
      };
    } }, async (session) => {
      const { page } = session;
      await page.goto(`${shared.server.url}/`);
      await waitState(page, 'no-webgpu', { timeout: 60_000 });
      assert.match(await text(page, '#webgpu-missing-reason'), /no module Web Workers/, 'the reason names module workers');
      assert.match(await text(page, '#status-text'), /not yet.*module Web Worker/i, 'the status line says it too');
    }));

  it('Chromium without --enable-unsafe-webgpu (no adapter): state no-webgpu and the explanation', { timeout: 2 * 60_000 }, (t) =>
    withBrowser(t, { server: shared.server, webgpu: false }, async (session) => {
      const { page } = session;
      await page.goto(`${shared.server.url}/`);
      await waitState(page, 'no-webgpu', { timeout: 60_000 });
      assert.ok(await page.isVisible('#webgpu-missing'), '#webgpu-missing is visible');
    }));
});

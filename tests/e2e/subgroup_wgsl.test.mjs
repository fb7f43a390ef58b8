// The page's subgroup matvecs through Chromium's own WGSL compiler (Tint). CI's SwiftShader
// adapter offers `subgroups`, but the page runs no subgroup kernel on a software adapter, so
// without this test only naga (natively) ever compiles them, and naga has no uniformity
// analysis: a barrier behind a branch on a private variable passed every native test and
// failed in the browser (BENCHMARKS.md "session 47"). examples/subgroup_wgsl.rs writes each
// kernel as the page hands it over (`MatmulKey::browser_source`); here a device with
// `subgroups` compiles every one and must report no error.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { GENERATED, ROOT, withBrowser } from './lib/harness.mjs';

const EXAMPLE = path.join(ROOT, 'target/release/examples/subgroup_wgsl');
const DIR = path.join(GENERATED, 'subgroup_wgsl');

describe('subgroup kernels in the browser\'s compiler', { timeout: 10 * 60_000 }, () => {
  let server;
  let url;
  before(async () => {
    if (!fs.existsSync(EXAMPLE)) throw new Error(`${EXAMPLE} is missing: cargo build --release --example subgroup_wgsl`);
    fs.rmSync(DIR, { recursive: true, force: true });
    execFileSync(EXAMPLE, [DIR], { stdio: 'pipe' });
    // WebGPU needs a secure context: an empty page on localhost.
    server = http.createServer((_, res) => res.end('<!doctype html><title>wgsl</title>'));
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${server.address().port}/`;
  });
  after(() => server?.close());

  it('every chunk and lane-per-8 matvec the page may run compiles without error', (t) =>
    withBrowser(t, async ({ page }) => {
      await page.goto(url);
      const files = fs.readdirSync(DIR).filter((f) => f.endsWith('.wgsl')).sort();
      assert.ok(files.length >= 60, `${files.length} kernels written`);
      const offered = await page.evaluate(async () => (await navigator.gpu.requestAdapter()).features.has('subgroups'));
      if (!offered) {
        t.skip('this browser\'s adapter offers no subgroups');
        return;
      }
      const failures = [];
      for (const f of files) {
        const errors = await page.evaluate(async (code) => {
          const adapter = await navigator.gpu.requestAdapter();
          const device = await adapter.requestDevice({ requiredFeatures: ['subgroups'] });
          const info = await device.createShaderModule({ code }).getCompilationInfo();
          device.destroy();
          return info.messages.filter((m) => m.type === 'error').map((m) => `${m.lineNum}:${m.linePos} ${m.message}`);
        }, fs.readFileSync(path.join(DIR, f), 'utf8'));
        if (errors.length) failures.push(`${f}: ${errors.slice(0, 2).join(' | ')}`);
      }
      assert.deepEqual(failures, [], `Tint rejected ${failures.length} of ${files.length} kernels`);
    }));
});

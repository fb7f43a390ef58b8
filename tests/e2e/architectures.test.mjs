// Every architecture's fixture in the page: streamed from the test server, a capability
// report without "not yet", the architecture named in it, and greedy tokens equal to native
// `coco run --temp 0` on lavapipe. The fixtures' logits are held against Hugging Face's by
// tests/model.rs; this holds the page's WebGPU path (Tint's compiler, SwiftShader) to the
// same tokens. One browser for the file; each fixture in a fresh page.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import {
  GREEDY, ROOT, firstDifference, generate, guard, loadModel, longTasksSince, openPage, pageNow, record, state, useTestServer,
} from './lib/harness.mjs';
import { nativeRun } from './lib/native.mjs';

// [fixture, the architecture its capability report names]. The llama family is covered by
// fixture.test.mjs and gemma3 by default_model.test.mjs (the real Gemma 3 270M); the vocabularies
// of qwen3 (151,669), smollm3 and granite (128,256) make their LM heads the slow part here.
const FIXTURES = [
  ['qwen3-q4_k', 'qwen3'],
  // phi3 as Phi-4-mini: partial RoPE (96 of 128 dimensions), LongRoPE, fused tensors split
  ['phi4-q8_0', 'phi3'],
  ['gemma2-q4_k', 'gemma2'],
  ['smollm3-q4_k', 'smollm3'],
  ['granite-q4_k', 'granite'],
];
const PROMPT = 'Once upon a time';
// SwiftShader is slow and the vocabularies are large (Qwen's 151,669 rows per LM head).
const N = 6;

describe('every architecture in the page', { timeout: 30 * 60_000 }, () => {
  const native = new Map(); // fixture -> {ids, text} from `coco run --temp 0` on lavapipe
  const shared = useTestServer({
    sharedBrowser: true,
    whileLaunching: async () => {
      for (const [name] of FIXTURES) {
        native.set(name, await nativeRun(path.join(ROOT, `tests/fixtures/${name}.gguf`), PROMPT, N));
      }
    },
  });

  for (const [name, arch] of FIXTURES) {
    it(`${name}: greedy output equals native (${N} tokens)`, { timeout: 8 * 60_000 }, (t) =>
      guard(t, shared.session, async () => {
        const { page } = shared.session;
        await openPage(page, shared.server);
        assert.equal(await state(page), 'ready');
        const loadMark = await pageNow(page);
        await loadModel(page, `fixtures/${name}.gguf`);
        const loadLongTasks = await longTasksSince(page, loadMark);
        const rows = await page.$$eval('#report tr[data-status]', (trs) => trs.map((r) => [r.dataset.status, r.textContent.replace(/\s+/g, ' ').trim()]));
        assert.deepEqual(rows.filter(([s]) => s === 'not_yet' || s === 'not-yet'), [], `no "not yet" row for ${name}`);
        assert.ok(rows.some(([, text]) => text.includes(arch)), `the report names the architecture ${arch}: ${JSON.stringify(rows)}`);
        const t0 = Date.now();
        const generateMark = await pageNow(page);
        const run = await generate(page, { prompt: PROMPT, fields: { ...GREEDY, 'max-tokens': N } });
        const generateLongTasks = await longTasksSince(page, generateMark);
        const want = native.get(name);
        const at = firstDifference(run.ids, want.ids);
        assert.equal(at, -1, `${name}: page and native differ at token ${at}:\n  page   ${JSON.stringify(run.ids)}\n  native ${JSON.stringify(want.ids)}`);
        record(`architecture ${arch} greedy`, {
          fixture: name, seconds: (Date.now() - t0) / 1000, decode_tok_s: run.decode_tok_s, dispatches_per_token: run.dispatches_per_token,
          // The main thread's tasks over 50 ms (window.cocoPage.longTasks) in each phase.
          long_tasks_load: loadLongTasks, long_tasks_generate: generateLongTasks,
        });
      }));
  }
});

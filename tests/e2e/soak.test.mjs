// Browser soak, scaled to SwiftShader (long runs must not grow memory or GPU resources): many
// sequential generations in one page must not leak. After each generation it records the wasm
// heap (linear memory only grows, so any growth is permanent), the GPU buffers coco has created
// (GpuContext counts every buffer it makes; a warm decode loop makes none), the cached bind
// groups and pipelines, and decode tok/s. Greedy decoding of the same prompt must give the same
// ids every time.
//
// The native soak runs 50 × 500 tokens; SwiftShader decodes the fixture at a few tok/s, so that
// is ~2 h. CI runs 50 × COCO_E2E_SOAK_TOKENS (default 4) instead; the native soak in
// tests/gpu_faults.rs covers the long generations (COCO_SOAK_TOKENS). For the full browser soak:
//   COCO_E2E_SOAK_TOKENS=500 node --test tests/e2e/soak.test.mjs
// tok/s is recorded in target/e2e/timings.jsonl, not asserted (a shared 2-core machine).
import { describe, it, before } from 'node:test';
import assert from 'node:assert/strict';
import { GREEDY, generate, guard, loadModel, longTasksSince, openPage, pageNow, record, useTestServer } from './lib/harness.mjs';

const FIXTURE_URL = 'fixtures/llama-spm-q4_0.gguf';
const PROMPT = 'Once upon a time';
const RUNS = Number(process.env.COCO_E2E_SOAK_RUNS ?? 50);
const TOKENS = Number(process.env.COCO_E2E_SOAK_TOKENS ?? 4);
// The wasm heap may still grow after the first generation by this much in all (allocator
// slack settling, e.g. a Vec that reaches its final capacity on the second run); a leak of even
// a few KB per generation exceeds it within 50 runs, because linear memory grows in 64 KiB pages
// and never shrinks.
const HEAP_SLACK = 2 * 65536;

describe('browser soak', { timeout: 60 * 60_000 }, () => {
  // Registered first, so bad settings fail before the server and the browser start.
  before(() => {
    assert.ok(RUNS >= 2 && TOKENS >= 1, `COCO_E2E_SOAK_RUNS (${RUNS}) must be ≥ 2 and COCO_E2E_SOAK_TOKENS (${TOKENS}) ≥ 1`);
  });
  const shared = useTestServer({ sharedBrowser: true });

  it(`${RUNS} sequential greedy generations of ${TOKENS} tokens: flat wasm heap and GPU resources, identical output`, { timeout: 55 * 60_000 }, (t) =>
    guard(t, shared.session, async () => {
      const { page } = shared.session;
      await openPage(page, shared.server);
      await loadModel(page, FIXTURE_URL);
      const samples = [];
      let first = null;
      const mark = await pageNow(page);
      for (let i = 0; i < RUNS; i++) {
        const run = await generate(page, { prompt: PROMPT, fields: { ...GREEDY, 'max-tokens': TOKENS }, timeout: 10 * 60_000 });
        const m = await page.evaluate(() => window.cocoPage.engine.memory());
        const sample = {
          run: i + 1,
          wasm_bytes: m.wasm_bytes,
          gpu_buffers_created: m.gpu_buffers_created,
          bind_groups: m.bind_groups,
          pipelines: m.pipelines,
          gpu_bytes: m.gpu_bytes,
          decode_tok_s: run.decode_tok_s,
          generated: run.generated_tokens,
        };
        samples.push(sample);
        if (!first) {
          first = { ...sample, ids: run.ids, text: run.text };
          // Guards against a soak that measures nothing: the run must really decode.
          assert.equal(run.ids.length, TOKENS, `the first generation makes ${TOKENS} tokens (stop: ${run.stop})`);
          for (const k of ['wasm_bytes', 'gpu_buffers_created', 'bind_groups', 'pipelines']) {
            assert.ok(Number.isFinite(m[k]) && m[k] > 0, `memory().${k} is a positive number (got ${m[k]})`);
          }
          continue;
        }
        // Checked every run, so a failure names the run where it started.
        assert.deepEqual(run.ids, first.ids, `run ${i + 1}: greedy ids differ from run 1 (${JSON.stringify(run.text)} vs ${JSON.stringify(first.text)})`);
        assert.equal(m.gpu_buffers_created, first.gpu_buffers_created, `run ${i + 1}: GPU buffers were created after the first generation (${first.gpu_buffers_created} → ${m.gpu_buffers_created})`);
        assert.equal(m.pipelines, first.pipelines, `run ${i + 1}: pipelines ${first.pipelines} → ${m.pipelines}`);
        assert.equal(m.bind_groups, first.bind_groups, `run ${i + 1}: cached bind groups ${first.bind_groups} → ${m.bind_groups}`);
        assert.equal(m.gpu_bytes, first.gpu_bytes, `run ${i + 1}: allocated GPU bytes ${first.gpu_bytes} → ${m.gpu_bytes}`);
        assert.ok(
          m.wasm_bytes <= first.wasm_bytes + HEAP_SLACK,
          `run ${i + 1}: wasm heap grew ${m.wasm_bytes - first.wasm_bytes} bytes since run 1 (${first.wasm_bytes} → ${m.wasm_bytes}; allowed ${HEAP_SLACK})`,
        );
      }
      const last = samples[samples.length - 1];
      const mean = samples.reduce((a, s) => a + s.decode_tok_s, 0) / samples.length;
      record('browser soak', {
        runs: RUNS,
        tokens_per_run: TOKENS,
        wasm_bytes_first: first.wasm_bytes,
        wasm_bytes_last: last.wasm_bytes,
        gpu_buffers_created_first: first.gpu_buffers_created,
        gpu_buffers_created_last: last.gpu_buffers_created,
        bind_groups: last.bind_groups,
        pipelines: last.pipelines,
        gpu_bytes: last.gpu_bytes,
        decode_tok_s_first: first.decode_tok_s,
        decode_tok_s_last: last.decode_tok_s,
        decode_tok_s_mean: mean,
        decode_tok_s_per_run: samples.map((s) => Number(s.decode_tok_s.toFixed(2))),
        // The main thread's tasks over 50 ms (window.cocoPage.longTasks) over all the runs.
        long_tasks_generate: await longTasksSince(page, mark),
      });
    }));
});

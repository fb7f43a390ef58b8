// The page's conversation and keyboard: chat mode with the GGUF's own template and the KV
// cache kept across turns, the "no chat template" note for a base model, and Enter /
// Shift+Enter / Esc in the prompt box. Real browser, SwiftShader WebGPU, real GGUF files
// (built by scripts/fixtures.sh): llama-spm-q4_0 has no template, llama-spm-chatml-q4_0 is
// the same model with SmolLM2-135M-Instruct's ChatML template. One browser for the file:
// each model is downloaded once and later loads come from the Cache API.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  GREEDY, finishedRun, guard, loadModel, openPage, record, setFields, settleLoad, state, text,
  useTestServer, waitState,
} from './lib/harness.mjs';
import { commonPrefix, tokenize } from './lib/native.mjs';

const BASE_URL = 'fixtures/llama-spm-q4_0.gguf';
const CHAT = 'tests/fixtures/llama-spm-chatml-q4_0.gguf';
const CHAT_URL = 'fixtures/llama-spm-chatml-q4_0.gguf';
// SwiftShader decodes the fixture at a few tokens per second: short answers.
const ANSWER_TOKENS = 6;

// What SmolLM2's template renders, written out by hand from its source (tools/make_fixtures.py):
// a default system turn when the conversation has none, then one ChatML block per message,
// then the generation prompt. The page's text must equal this byte for byte.
const SYSTEM = '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n';
function chatml(messages) {
  return SYSTEM + messages.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`).join('') + '<|im_start|>assistant\n';
}

/** Records every #app[data-state] the page passes through, in window.__states. */
async function watchStates(page) {
  await page.evaluate(() => {
    window.__states = [];
    const app = document.getElementById('app');
    window.__stateObserver?.disconnect();
    window.__stateObserver = new MutationObserver(() => window.__states.push(app.dataset.state));
    window.__stateObserver.observe(app, { attributes: true, attributeFilter: ['data-state'] });
  });
}

/** Marks the current lastStats as seen, so finishedRun waits for the next run's stats. */
async function expectNewRun(page) {
  await page.evaluate(() => {
    const s = window.cocoPage.lastStats;
    if (s && typeof s === 'object') s.__seen = true;
  });
}

/** Types a chat message, optionally checks the templated prompt first, sends, waits. */
async function chatTurn(page, message) {
  await page.fill('#prompt', message);
  // "Show templated prompt" renders the conversation plus the message in the box: exactly
  // what the turn will tokenize.
  await page.click('#show-template');
  await page.locator('#template-view').waitFor({ state: 'visible', timeout: 10_000 });
  const rendered = await page.evaluate(() => document.getElementById('template-view').textContent);
  await expectNewRun(page);
  await page.click('#send');
  const stats = await finishedRun(page);
  return { rendered, stats };
}

describe('page: chat and keys', { timeout: 20 * 60_000 }, () => {
  const shared = useTestServer({ sharedBrowser: true });

  it('chat with a GGUF that has no chat template: the page says chat needs one, and the engine refuses', { timeout: 5 * 60_000 }, (t) =>
    guard(t, shared.session, async () => {
      const { page } = shared.session;
      await openPage(page, shared.server);
      // The visitor picks Chat first, then loads a base model.
      await page.selectOption('#mode', 'chat');
      await loadModel(page, BASE_URL);
      assert.equal(await page.evaluate(() => window.cocoPage.model?.chat_template), false, 'the fixture has no tokenizer.chat_template');
      assert.ok(await page.isVisible('#chat-note'), 'a note about the missing template is shown');
      assert.match(await text(page, '#chat-note'), /no chat template/i);
      assert.equal(await page.isDisabled('#send'), true, 'Send is off in chat mode without a template');
      assert.equal(await page.isDisabled('#show-template'), true, 'nothing to render without a template');
      // Back to completion: Chat can't be picked again for this model.
      await page.selectOption('#mode', 'complete');
      assert.equal(await page.isDisabled('#send'), false, 'completion works with a base model');
      assert.equal(await page.locator('#mode option[value="chat"]').isDisabled(), true, 'the Chat option is disabled for a model without a template');
      // The engine itself refuses too (nothing silently falls back to plain completion).
      const refusal = await page.evaluate(async () => {
        try {
          await window.cocoPage.engine.chat([{ role: 'user', content: 'hi' }], { max_tokens: 1 }, () => true);
          return null;
        } catch (e) {
          return { message: e.message, kind: e.kind, isError: e instanceof Error };
        }
      });
      assert.match(refusal?.message ?? '(no error)', /not yet.*no chat template/i);
      // The typed boundary (www/API.md, PageError): an Error whose kind the page switches on.
      assert.equal(refusal.kind, 'not_yet', 'the refusal is a PageError of kind "not_yet"');
      assert.equal(refusal.isError, true, 'thrown as an Error');
      const wrongCall = await page.evaluate(async () => {
        try {
          await window.cocoPage.engine.set_pipeline('nonesuch');
          return null;
        } catch (e) {
          return { kind: e.kind, name: e.name };
        }
      });
      assert.deepEqual(wrongCall, { kind: 'invalid_request', name: 'PageError' }, 'an unknown pipeline is the caller\'s mistake');
    }));

  it('keys: Shift+Enter adds a line, Enter sends, Esc stops a running generation', { timeout: 6 * 60_000 }, (t) =>
    guard(t, shared.session, async () => {
      const { page } = shared.session;
      await waitState(page, 'loaded');
      await page.selectOption('#mode', 'complete');
      await setFields(page, { ...GREEDY, 'max-tokens': 3 });
      await watchStates(page);

      // Shift+Enter: a newline in the box, no generation.
      await page.fill('#prompt', 'Once upon');
      await page.focus('#prompt');
      await page.keyboard.press('End');
      await page.keyboard.press('Shift+Enter');
      await page.keyboard.type('a time');
      assert.equal(await page.inputValue('#prompt'), 'Once upon\na time', 'Shift+Enter inserted a newline');
      assert.deepEqual(await page.evaluate(() => window.__states), [], 'Shift+Enter started nothing');

      // Enter: sends (no click), and the newline it would have typed is not added.
      await expectNewRun(page);
      await page.keyboard.press('Enter');
      const run = await finishedRun(page);
      assert.ok((await page.evaluate(() => window.__states)).includes('generating'), 'Enter started a generation');
      assert.equal(run.generated_tokens, 3);
      assert.equal(await page.inputValue('#prompt'), 'Once upon\na time', 'Enter sent the prompt without adding a line to it');

      // Esc: stops a long generation early, and the page says why it stopped.
      const max = 200;
      await setFields(page, { 'max-tokens': max });
      await expectNewRun(page);
      await page.focus('#prompt');
      await page.keyboard.press('Enter');
      await waitState(page, 'generating', { timeout: 30_000 });
      await page.waitForFunction(() => (document.getElementById('output')?.textContent ?? '').length > 0, null, { timeout: 120_000 });
      await page.keyboard.press('Escape');
      const stopped = await finishedRun(page);
      assert.equal(stopped.stop, 'stopped', `the run ended because of Esc (stop reason "${stopped.stop}")`);
      assert.ok(stopped.generated_tokens < max, `generation ended early: ${stopped.generated_tokens} of ${max} tokens`);
      assert.equal(await text(page, '#stats [data-stat="stop"]'), 'stopped by you', 'the stop reason is shown');
      record('page esc', { generated_before_stop: stopped.generated_tokens, max });
    }));

  it('chat: the GGUF template renders the turns, the second turn prefills only itself, and a fresh run agrees', { timeout: 10 * 60_000 }, async (t) => {
    const { page, context } = shared.session;
    const questions = ['What is the capital of France?', 'And the capital of Spain?'];
    let turn1;
    let turn2;
    let ids2;
    let link;
    await guard(t, shared.session, async () => {
      await waitState(page, 'loaded');
      // Loaded in completion mode: the base model before it left the Chat option disabled.
      await loadModel(page, CHAT_URL);
      await page.selectOption('#mode', 'chat');
      assert.equal(await page.evaluate(() => window.cocoPage.model?.chat_template), true, 'the chat fixture carries a template');
      assert.equal(await page.isVisible('#chat-note'), false, 'no "needs a template" note for a model that has one');
      await page.click('#reset-chat');
      await setFields(page, { ...GREEDY, 'max-tokens': ANSWER_TOKENS });

      // Turn 1: rendered by the template, everything prefilled.
      turn1 = await chatTurn(page, questions[0]);
      const conversation1 = [{ role: 'user', content: questions[0] }];
      assert.equal(turn1.rendered, chatml(conversation1), 'the templated prompt of turn 1');
      assert.equal(
        await page.evaluate((m) => window.cocoPage.engine.render_chat(m), conversation1),
        turn1.rendered,
        'coco.render_chat gives the same text as the page shows',
      );
      const ids1 = await tokenize(CHAT, turn1.rendered);
      assert.equal(turn1.stats.prompt_tokens, ids1.length, 'turn 1 tokenizes like native `coco tokenize`');
      assert.equal(turn1.stats.reused_tokens, 0, 'nothing to reuse on the first turn');
      assert.equal(turn1.stats.generated_tokens, ANSWER_TOKENS);
      const log1 = await page.$$eval('#chat-log li', (lis) => lis.map((li) => [li.dataset.role, li.querySelector('.chat-text').textContent]));
      assert.deepEqual(log1, [['user', questions[0]], ['assistant', turn1.stats.text]], 'the conversation shows both sides');

      // Turn 2: the template renders the whole conversation, but the KV cache still holds turn
      // 1 and its answer, so only what follows them is prefilled.
      turn2 = await chatTurn(page, questions[1]);
      const conversation2 = [...conversation1, { role: 'assistant', content: turn1.stats.text }, { role: 'user', content: questions[1] }];
      assert.equal(turn2.rendered, chatml(conversation2), 'the templated prompt of turn 2 holds the whole conversation');
      ids2 = await tokenize(CHAT, turn2.rendered);
      assert.equal(turn2.stats.prompt_tokens, ids2.length, 'turn 2 tokenizes like native `coco tokenize`');
      // The cache after turn 1: its prompt and the answer's tokens, except the last one when
      // it stopped at max tokens (that token was emitted but never run through the model).
      const answer = turn1.stats.stop === 'max_tokens' ? turn1.stats.ids.slice(0, -1) : turn1.stats.ids;
      const cached = [...ids1, ...answer];
      const expectReused = Math.min(commonPrefix(cached, ids2), ids2.length - 1);
      assert.equal(turn2.stats.reused_tokens, expectReused, `turn 2 reuses the cached tokens the new prompt starts with (${expectReused})`);
      assert.ok(turn2.stats.reused_tokens >= ids1.length, `all of turn 1's ${ids1.length} prompt tokens were reused (reused ${turn2.stats.reused_tokens})`);
      const prefilled = ids2.length - expectReused;
      const newTurn = ids2.length - ids1.length;
      assert.ok(prefilled <= newTurn, `turn 2 prefilled ${prefilled} tokens, no more than the ${newTurn} the conversation grew by (not all ${ids2.length})`);
      assert.match(await text(page, '#stats [data-stat="prefill"]'), new RegExp(`\\(${prefilled} tokens\\)`), 'the page shows the prefilled count');
      assert.equal(await text(page, '#stats [data-stat="tokens"]'), `${ids2.length} (${expectReused} reused)`, 'the page shows prompt and reused tokens');
      record('page chat', { turn1_prompt: ids1.length, turn2_prompt: ids2.length, turn2_reused: expectReused, turn2_prefilled: prefilled });

      // The share link carries the conversation without its last answer; opening it answers
      // that conversation from scratch, in a page whose engine has no cache at all.
      await page.click('#copy-link');
      await page.waitForFunction(() => document.getElementById('share-url')?.value.includes('chat='), null, { timeout: 10_000 });
      link = await page.inputValue('#share-url');
      assert.deepEqual(JSON.parse(new URL(link).searchParams.get('chat')), conversation2, 'the link holds the conversation up to the last question');
    });

    const fresh = await context.newPage();
    await guard(
      t,
      shared.session,
      async () => {
        await fresh.goto(link);
        await settleLoad(fresh, { until: ['loaded'] });
        const run = await finishedRun(fresh, { timeout: 120_000 });
        assert.equal(run.reused_tokens, 0, 'a fresh page prefills everything');
        assert.equal(run.prompt_tokens, ids2.length, 'the same templated prompt');
        assert.deepEqual(run.ids, turn2.stats.ids, `the answer with a reused cache equals a fresh run:\n  reused ${JSON.stringify(turn2.stats.text)}\n  fresh  ${JSON.stringify(run.text)}`);
        assert.equal(await state(fresh), 'loaded');
      },
      fresh,
    );
    await fresh.close();
  });
});

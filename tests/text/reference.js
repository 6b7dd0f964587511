// Reference runner for the tokenizer parity tests. Runs Hugging Face `tokenizers` (Node
// binding) and `tiktoken` (npm) on the test inputs and writes, per tokenizer, one JSON line per
// input with the ids, tokens, offsets, word ids and the decoded text. Also writes the tokenizer
// files it builds with HF's own builders (BERT, T5-style Unigram, WordLevel, variants) and a
// manifest.json listing everything for the C++ test.
//
// usage: node reference.js <npm_dir> <data_dir> <tests_text_dir> <out_dir> [lines_per_corpus]
'use strict';
const fs = require('fs');
const path = require('path');

const [npmDir, dataDirArg, testsDir, outDirArg, linesArg] = process.argv.slice(2);
const dataDir = path.resolve(dataDirArg);
const outDir = path.resolve(outDirArg);
const LINES = parseInt(linesArg || '1000', 10);
const hf = require(path.resolve(npmDir, 'node_modules', 'tokenizers'));
const tiktoken = require(path.resolve(npmDir, 'node_modules', 'tiktoken'));
fs.mkdirSync(outDir, { recursive: true });

// ---------------------------------------------------------------------------------------------
// Inputs: corpus prefixes + adversarial strings + raw lines with invalid UTF-8.
function corpusLines(file, n) {
  const text = fs.readFileSync(path.join(dataDir, 'corpora', file), 'utf8');
  return text.split('\n').slice(0, n);
}
const inputs = [];
for (const f of ['tinyshakespeare.txt', 'wikitext2.valid.txt', 'wikitext2.test.txt'])
  for (const line of corpusLines(f, LINES)) inputs.push({ text: line, src: f });
for (const s of JSON.parse(fs.readFileSync(path.join(testsDir, 'adversarial.json'), 'utf8')))
  inputs.push({ text: s, src: 'adversarial' });
const raw = fs.readFileSync(path.join(testsDir, 'invalid_utf8.bin'));
let start = 0;
for (let i = 0; i <= raw.length; i++) {
  if (i === raw.length || raw[i] === 0x0a) {
    if (i > start) {
      const bytes = raw.subarray(start, i);
      inputs.push({ text: bytes.toString('utf8'), raw_b64: bytes.toString('base64'), src: 'invalid_utf8' });
    }
    start = i + 1;
  }
}
// A multi-line document as one input too.
inputs.push({ text: corpusLines('tinyshakespeare.txt', 40).join('\n'), src: 'multiline' });
fs.writeFileSync(path.join(outDir, 'inputs.jsonl'), inputs.map((x) => JSON.stringify(x)).join('\n') + '\n');
const texts = inputs.map((x) => x.text);

// ---------------------------------------------------------------------------------------------
// Tokenizers built with HF's builders or loaded from files.
const tokDir = path.join(dataDir, 'tokenizers');
const manifest = [];

function saveTok(tok, name) {
  const p = path.join(outDir, name + '.tokenizer.json');
  tok.save(p, true);
  return p;
}
function writeJson(obj, name) {
  const p = path.join(outDir, name + '.tokenizer.json');
  fs.writeFileSync(p, JSON.stringify(obj, null, 1));
  return p;
}
function readJson(p) {
  return JSON.parse(fs.readFileSync(p, 'utf8'));
}

// FOUNDRY_REF_ONLY=name1,name2 restricts the run (used for full-corpus checks).
const ONLY = process.env.FOUNDRY_REF_ONLY ? new Set(process.env.FOUNDRY_REF_ONLY.split(',')) : null;

async function runHF(name, tok, load, opts = {}) {
  if (ONLY && !ONLY.has(name)) return;
  const addSpecial = opts.addSpecial !== undefined ? opts.addSpecial : true;
  const out = [];
  const B = 256;
  for (let i = 0; i < texts.length; i += B) {
    const chunk = texts.slice(i, i + B);
    let encs;
    if (opts.pairs) {
      encs = await Promise.all(chunk.map((t, k) => tok.encode(t, texts[(i + k + 1) % texts.length], { addSpecialTokens: addSpecial })));
    } else {
      encs = await tok.encodeBatch(chunk, { addSpecialTokens: addSpecial });
    }
    const decs = await tok.decodeBatch(encs.map((e) => e.getIds()), false);
    const decsSkip = await tok.decodeBatch(encs.map((e) => e.getIds()), true);
    encs.forEach((e, k) => {
      out.push(JSON.stringify({
        ids: e.getIds(), tokens: e.getTokens(), offsets: e.getOffsets(), word_ids: e.getWordIds().map((w) => (w === null || w === undefined ? -1 : w)),
        type_ids: e.getTypeIds(), special_tokens_mask: e.getSpecialTokensMask(), attention_mask: e.getAttentionMask(),
        overflowing: e.getOverflowing().map((o) => o.getIds()), decode: decs[k], decode_skip: decsSkip[k],
      }));
    });
  }
  const file = path.join(outDir, name + '.expected.jsonl');
  fs.writeFileSync(file, out.join('\n') + '\n');
  manifest.push(Object.assign({ name, expected: file, add_special: addSpecial, pairs: !!opts.pairs, compare_offsets: true }, load));
}

function runTiktoken(name, encName, tiktokenFile, special) {
  if (ONLY && !ONLY.has(name)) return;
  const enc = tiktoken.get_encoding(encName);
  const out = [];
  const td = new TextDecoder('utf-8');
  const bl = byteLevelTable();
  for (const t of texts) {
    const ids = Array.from(special ? enc.encode(t, 'all') : enc.encode_ordinary(t));
    const tokens = ids.map((id) => Array.from(enc.decode_single_token_bytes(id)).map((b) => bl[b]).join(''));
    out.push(JSON.stringify({ ids, tokens, decode: td.decode(enc.decode(new Uint32Array(ids))) }));
  }
  enc.free();
  const file = path.join(outDir, name + '.expected.jsonl');
  fs.writeFileSync(file, out.join('\n') + '\n');
  manifest.push({ name, kind: 'tiktoken', path: tiktokenFile, encoding: encName, expected: file, add_special: special, pairs: false, compare_offsets: false });
}

function byteLevelTable() {
  const bs = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n); n++; }
  const t = {};
  bs.forEach((b, i) => { t[b] = String.fromCodePoint(cs[i]); });
  return t;
}

// Converts tiktoken's npm rank JSON into a .tiktoken rank file.
function writeTiktokenFile(encName) {
  const j = readJson(path.join(npmDir, 'node_modules', 'tiktoken', 'encoders', encName + '.json'));
  const lines = [];
  for (const line of j.bpe_ranks.split('\n')) {
    if (!line) continue;
    const parts = line.split(' ');
    const offset = parseInt(parts[1], 10);
    parts.slice(2).forEach((tok, i) => lines.push(tok + ' ' + (offset + i)));
  }
  const p = path.join(outDir, encName + '.tiktoken');
  fs.writeFileSync(p, lines.join('\n') + '\n');
  return p;
}

// Minimal protobuf reader for SentencePiece ModelProto (pieces + charsmap).
function readSpm(file) {
  const buf = fs.readFileSync(file);
  let pos = 0;
  function varint(b, p) { let v = 0, s = 0, x; do { x = b[p.i++]; v += (x & 0x7f) * Math.pow(2, s); s += 7; } while (x & 0x80); return v; }
  const pieces = [];
  let charsmap = null;
  const p = { i: 0 };
  while (p.i < buf.length) {
    const tag = varint(buf, p); const f = Math.floor(tag / 8), wt = tag & 7;
    if (wt === 2) {
      const len = varint(buf, p); const sub = buf.subarray(p.i, p.i + len); p.i += len;
      if (f === 1) {
        const q = { i: 0 }; let piece = '', score = 0, type = 1;
        while (q.i < sub.length) {
          const t2 = varint(sub, q); const f2 = Math.floor(t2 / 8), w2 = t2 & 7;
          if (w2 === 2) { const l2 = varint(sub, q); const s2 = sub.subarray(q.i, q.i + l2); q.i += l2; if (f2 === 1) piece = s2.toString('utf8'); }
          else if (w2 === 5) { if (f2 === 2) score = sub.readFloatLE(q.i); q.i += 4; }
          else if (w2 === 0) { const v = varint(sub, q); if (f2 === 3) type = v; }
          else if (w2 === 1) q.i += 8;
        }
        pieces.push({ piece, score, type });
      } else if (f === 3) {
        const q = { i: 0 };
        while (q.i < sub.length) {
          const t2 = varint(sub, q); const f2 = Math.floor(t2 / 8), w2 = t2 & 7;
          if (w2 === 2) { const l2 = varint(sub, q); if (f2 === 2) charsmap = sub.subarray(q.i, q.i + l2); q.i += l2; }
          else if (w2 === 0) varint(sub, q); else if (w2 === 5) q.i += 4; else if (w2 === 1) q.i += 8;
        }
      }
    } else if (wt === 0) varint(buf, p); else if (wt === 5) p.i += 4; else if (wt === 1) p.i += 8;
  }
  return { pieces, charsmap };
}

async function main() {
  // 1. Files as shipped.
  for (const n of ['llama3', 'phi-2', 'phi-3']) {
    const file = path.join(tokDir, n, 'tokenizer.json');
    await runHF(n, hf.Tokenizer.fromFile(file), { kind: 'json', path: file });
  }
  await runHF('llama3-nospecial', hf.Tokenizer.fromFile(path.join(tokDir, 'llama3', 'tokenizer.json')), { kind: 'json', path: path.join(tokDir, 'llama3', 'tokenizer.json') }, { addSpecial: false });

  // 2. GPT-2 from encoder.json + vocab.bpe, assembled with HF's builders.
  {
    const model = await hf.BPE.fromFile(path.join(tokDir, 'gpt2', 'encoder.json'), path.join(tokDir, 'gpt2', 'vocab.bpe'));
    const tok = new hf.Tokenizer(model);
    tok.setPreTokenizer(hf.byteLevelPreTokenizer(false, true));
    tok.setPostProcessor(hf.byteLevelProcessing(false));
    tok.addSpecialTokens(['<|endoftext|>']);
    // The Node binding has no ByteLevel decoder builder: add it to the saved file.
    const j = readJson(saveTok(tok, 'gpt2-hf-built'));
    j.decoder = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };
    const file = writeJson(j, 'gpt2-hf-built');
    await runHF('gpt2-files', hf.Tokenizer.fromFile(file), { kind: 'gpt2', path: path.join(tokDir, 'gpt2', 'encoder.json') });
  }

  // 3. BERT uncased and cased (WordPiece) from vocab.txt with HF's builders.
  for (const cased of [false, true]) {
    const name = cased ? 'bert-cased' : 'bert-uncased';
    const model = await hf.WordPiece.fromFile(path.join(tokDir, 'bert-base-cased', 'vocab.txt'), { unkToken: '[UNK]' });
    const tok = new hf.Tokenizer(model);
    tok.setNormalizer(hf.bertNormalizer({ lowercase: !cased, stripAccents: !cased, cleanText: true, handleChineseChars: true }));
    tok.setPreTokenizer(hf.bertPreTokenizer());
    tok.setDecoder(hf.wordPieceDecoder('##', true));
    tok.setPostProcessor(hf.bertProcessing(['[SEP]', 102], ['[CLS]', 101]));
    tok.addSpecialTokens(['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']);
    const file = saveTok(tok, name);
    await runHF(name, hf.Tokenizer.fromFile(file), { kind: 'json', path: file });
  }
  // BERT pairs with truncation (stride, overflow) and padding.
  {
    const j = readJson(path.join(outDir, 'bert-cased.tokenizer.json'));
    j.truncation = { direction: 'Right', max_length: 24, strategy: 'LongestFirst', stride: 3 };
    j.padding = { strategy: { Fixed: 32 }, direction: 'Right', pad_to_multiple_of: null, pad_id: 0, pad_type_id: 0, pad_token: '[PAD]' };
    const file = writeJson(j, 'bert-pairs-trunc');
    await runHF('bert-pairs-trunc', hf.Tokenizer.fromFile(file), { kind: 'json', path: file }, { pairs: true });
    const j2 = readJson(path.join(outDir, 'bert-uncased.tokenizer.json'));
    j2.truncation = { direction: 'Left', max_length: 16, strategy: 'OnlyFirst', stride: 2 };
    j2.padding = { strategy: 'BatchLongest', direction: 'Left', pad_to_multiple_of: 8, pad_id: 0, pad_type_id: 0, pad_token: '[PAD]' };
    const file2 = writeJson(j2, 'bert-left-trunc');
    await runHF('bert-left-trunc', hf.Tokenizer.fromFile(file2), { kind: 'json', path: file2 });
  }

  // 4. Component variants on the BERT vocab (normalizers and pre-tokenizers).
  {
    const base = readJson(path.join(outDir, 'bert-cased.tokenizer.json'));
    const variants = {
      'wp-nfkc-digits': {
        normalizer: { type: 'Sequence', normalizers: [{ type: 'NFKC' }, { type: 'Strip', strip_left: true, strip_right: true }] },
        pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'Whitespace' }, { type: 'Digits', individual_digits: true }] },
      },
      'wp-nfd-lower-punct': {
        normalizer: { type: 'Sequence', normalizers: [{ type: 'NFD' }, { type: 'Lowercase' }, { type: 'StripAccents' }] },
        pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'WhitespaceSplit' }, { type: 'Punctuation', behavior: 'Contiguous' }, { type: 'Digits', individual_digits: false }] },
      },
      'wp-nfc-split': {
        normalizer: { type: 'Sequence', normalizers: [{ type: 'NFC' }, { type: 'Replace', pattern: { Regex: '\\s+' }, content: ' ' }, { type: 'Nmt' }] },
        pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'Split', pattern: { String: ' ' }, behavior: 'MergedWithNext', invert: false }, { type: 'Split', pattern: { Regex: '[,.]' }, behavior: 'MergedWithPrevious', invert: false }, { type: 'CharDelimiterSplit', delimiter: '-' }] },
      },
      'wp-nfkd-invert': {
        normalizer: { type: 'Sequence', normalizers: [{ type: 'NFKD' }, { type: 'Prepend', prepend: '#' }] },
        pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'Split', pattern: { Regex: '\\p{L}+|\\p{N}+' }, behavior: 'Removed', invert: true }, { type: 'UnicodeScripts' }] },
      },
    };
    for (const [name, v] of Object.entries(variants)) {
      const j = Object.assign({}, base, v);
      const file = writeJson(j, name);
      await runHF(name, hf.Tokenizer.fromFile(file), { kind: 'json', path: file });
    }
  }

  // 5. RoBERTa-style byte-level BPE (phi-2 vocab) with add_prefix_space and trimmed offsets,
  //    and added tokens with lstrip/rstrip/single_word/normalized options.
  {
    const j = readJson(path.join(tokDir, 'phi-2', 'tokenizer.json'));
    j.pre_tokenizer = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };
    j.post_processor = { type: 'RobertaProcessing', sep: ['<|endoftext|>', 50256], cls: ['<|endoftext|>', 50256], trim_offsets: true, add_prefix_space: true };
    j.added_tokens.push({ id: 0, content: '<mask>', single_word: true, lstrip: true, rstrip: true, normalized: false, special: true });
    j.added_tokens.push({ id: 0, content: 'world', single_word: true, lstrip: false, rstrip: false, normalized: true, special: false });
    j.added_tokens.push({ id: 0, content: ' the', single_word: false, lstrip: false, rstrip: true, normalized: true, special: false });
    const file = writeJson(j, 'roberta-style');
    await runHF('roberta-style', hf.Tokenizer.fromFile(file), { kind: 'json', path: file });
    await runHF('roberta-pairs', hf.Tokenizer.fromFile(file), { kind: 'json', path: file }, { pairs: true });
  }

  // 6. T5-style Unigram from the SentencePiece test model's pieces, with its charsmap.
  {
    const spm = readSpm(path.join(tokDir, 'sentencepiece', 'spm_test_model.model'));
    const unkId = spm.pieces.findIndex((p) => p.type === 2);
    const j = {
      version: '1.0', truncation: null, padding: null,
      added_tokens: spm.pieces.map((p, i) => ({ p, i })).filter(({ p }) => p.type === 2 || p.type === 3).map(({ p, i }) => ({ id: i, content: p.piece, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })),
      normalizer: { type: 'Sequence', normalizers: [{ type: 'Precompiled', precompiled_charsmap: Buffer.from(spm.charsmap).toString('base64') }, { type: 'Replace', pattern: { Regex: ' {2,}' }, content: ' ' }] },
      pre_tokenizer: { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: true },
      post_processor: { type: 'TemplateProcessing', single: [{ Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '</s>', type_id: 0 } }], pair: [{ Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '</s>', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }, { SpecialToken: { id: '</s>', type_id: 1 } }], special_tokens: { '</s>': { id: '</s>', ids: [spm.pieces.findIndex((p) => p.piece === '</s>')], tokens: ['</s>'] } } },
      decoder: { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: true },
      model: { type: 'Unigram', unk_id: unkId, vocab: spm.pieces.map((p) => [p.piece, p.score]), byte_fallback: false },
    };
    const file = writeJson(j, 't5-unigram');
    await runHF('t5-unigram', hf.Tokenizer.fromFile(file), { kind: 'json', path: file });
    // Llama-2 pieces as a Unigram with byte_fallback (exercises the byte fallback path).
    const l2 = readSpm(path.join(tokDir, 'sentencepiece', 'llama2.tokenizer.model'));
    const j2 = Object.assign({}, j, {
      added_tokens: [],
      normalizer: { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: '\u2581' }, { type: 'Replace', pattern: { String: ' ' }, content: '\u2581' }] },
      pre_tokenizer: null, post_processor: null,
      decoder: { type: 'Sequence', decoders: [{ type: 'Replace', pattern: { String: '\u2581' }, content: ' ' }, { type: 'ByteFallback' }, { type: 'Fuse' }, { type: 'Strip', content: ' ', start: 1, stop: 0 }] },
      model: { type: 'Unigram', unk_id: 0, vocab: l2.pieces.map((p) => [p.piece, p.type === 1 ? p.score : 0]), byte_fallback: true },
    });
    const file2 = writeJson(j2, 'unigram-bytefallback');
    await runHF('unigram-bytefallback', hf.Tokenizer.fromFile(file2), { kind: 'json', path: file2 });
  }

  // 7. WordLevel over the most frequent words of tinyshakespeare.
  {
    const words = fs.readFileSync(path.join(dataDir, 'corpora', 'tinyshakespeare.txt'), 'utf8').toLowerCase().split(/\s+/);
    const counts = new Map();
    for (const w of words) if (w) counts.set(w, (counts.get(w) || 0) + 1);
    const top = [...counts.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).slice(0, 3000).map((e) => e[0]);
    const vocab = { '[UNK]': 0 };
    top.forEach((w, i) => { vocab[w] = i + 1; });
    const tok = new hf.Tokenizer(hf.WordLevel.init(vocab, { unkToken: '[UNK]' }));
    tok.setNormalizer(hf.sequenceNormalizer([hf.nfkcNormalizer(), hf.lowercase()]));
    tok.setPreTokenizer(hf.whitespaceSplitPreTokenizer());
    tok.setPostProcessor(hf.templateProcessing('$A', '$A $B:1', []));
    const file = saveTok(tok, 'wordlevel');
    await runHF('wordlevel', hf.Tokenizer.fromFile(file), { kind: 'json', path: file });
  }

  // 8. tiktoken rank files.
  const r50k = path.join(tokDir, 'tiktoken', 'r50k_base.tiktoken');
  const p50k = path.join(tokDir, 'tiktoken', 'p50k_base.tiktoken');
  const cl100k = writeTiktokenFile('cl100k_base');
  const o200k = writeTiktokenFile('o200k_base');
  runTiktoken('tiktoken-r50k', 'r50k_base', r50k, false);
  runTiktoken('tiktoken-p50k-special', 'p50k_base', p50k, true);
  runTiktoken('tiktoken-cl100k', 'cl100k_base', cl100k, false);
  runTiktoken('tiktoken-cl100k-special', 'cl100k_base', cl100k, true);
  runTiktoken('tiktoken-o200k', 'o200k_base', o200k, false);

  // 9. Components one by one: normalizers (normalizeString), pre-tokenizers
  //    (preTokenizeString) and decoders (decode of token lists), from tokenizer.json objects.
  {
    const adv = JSON.parse(fs.readFileSync(path.join(testsDir, 'adversarial.json'), 'utf8'));
    const strs = adv.concat(texts.slice(0, 200));
    const wrap = (extra) => Object.assign({ version: '1.0', truncation: null, padding: null, added_tokens: [], normalizer: null, pre_tokenizer: null, post_processor: null, decoder: null, model: { type: 'WordLevel', vocab: { '[UNK]': 0 }, unk_token: '[UNK]' } }, extra);
    const normalizers = [
      { type: 'NFC' }, { type: 'NFD' }, { type: 'NFKC' }, { type: 'NFKD' }, { type: 'Lowercase' }, { type: 'StripAccents' },
      { type: 'Strip', strip_left: true, strip_right: false }, { type: 'Nmt' }, { type: 'ByteLevel' },
      { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
      { type: 'BertNormalizer', clean_text: false, handle_chinese_chars: false, strip_accents: true, lowercase: false },
      { type: 'Replace', pattern: { Regex: '[aeiou]+' }, content: '_' }, { type: 'Prepend', prepend: '>>' },
      { type: 'Sequence', normalizers: [{ type: 'NFKD' }, { type: 'StripAccents' }, { type: 'Lowercase' }, { type: 'Replace', pattern: { String: ' ' }, content: '' }] },
    ];
    const pres = [
      { type: 'Whitespace' }, { type: 'WhitespaceSplit' }, { type: 'BertPreTokenizer' },
      { type: 'Punctuation', behavior: 'Isolated' }, { type: 'Punctuation', behavior: 'MergedWithPrevious' }, { type: 'Punctuation', behavior: 'MergedWithNext' }, { type: 'Punctuation', behavior: 'Removed' },
      { type: 'Digits', individual_digits: true }, { type: 'Digits', individual_digits: false },
      { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: true }, { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'first', split: false }, { type: 'Metaspace', replacement: '_', prepend_scheme: 'never', split: true },
      { type: 'CharDelimiterSplit', delimiter: ' ' }, { type: 'UnicodeScripts' }, { type: 'FixedLength', length: 3 },
      { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true }, { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
      { type: 'Split', pattern: { Regex: '\\s+' }, behavior: 'Contiguous', invert: false }, { type: 'Split', pattern: { String: 'e' }, behavior: 'MergedWithNext', invert: true },
      { type: 'Split', pattern: { Regex: "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" }, behavior: 'Isolated', invert: false },
      // Qwen2's pattern (single digits).
      { type: 'Split', pattern: { Regex: "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" }, behavior: 'Isolated', invert: false },
      // GPT-2's pattern through Split.
      { type: 'Split', pattern: { Regex: "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+" }, behavior: 'Isolated', invert: false },
    ];
    const decoders = [
      { type: 'BPEDecoder', suffix: '</w>' }, { type: 'CTC', pad_token: '<pad>', word_delimiter_token: '|', cleanup: true },
      { type: 'CTC', pad_token: '<pad>', word_delimiter_token: '|', cleanup: false },
      { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: true }, { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'never', split: true },
      { type: 'WordPiece', prefix: '##', cleanup: false }, { type: 'WordPiece', prefix: '##', cleanup: true },
      { type: 'Strip', content: 'x', start: 2, stop: 1 }, { type: 'Replace', pattern: { Regex: 'a+' }, content: 'A' }, { type: 'ByteFallback' }, { type: 'Fuse' },
      { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
      { type: 'Sequence', decoders: [{ type: 'ByteFallback' }, { type: 'Fuse' }, { type: 'Strip', content: ' ', start: 1, stop: 0 }] },
    ];
    const tokenLists = [
      ['hel', 'lo</w>', 'wor', 'ld</w>'], ['<pad>', 'h', 'h', 'e', '<pad>', 'l', 'l', '|', 'o', 'o', '|', 'w'],
      ['\u2581Hello', '\u2581', '\u2581world', '!'], ['\u2581\u2581a', 'b\u2581'], ['un', '##aff', '##able', ' .', 'do', 'n\'t', ','],
      ['xxhixx', 'xa', 'aab', 'xy'], ['<0x48>', '<0x69>', ' ', '<0xE2>', '<0x82>', '<0xAC>', '<0xE2>', '<0x82>', 'z', '<0xFF>', '<0x4G>'],
      ['\u0120Hello', '\u0120w\u00c3\u00b6rld', '<|endoftext|>', '\u010a'], ['a', 'xax', 'bx'], [],
    ];
    const out = [];
    for (const n of normalizers) {
      const t = hf.Tokenizer.fromString(JSON.stringify(wrap({ normalizer: n })));
      const norm = t.getNormalizer();
      for (const s of strs) out.push(JSON.stringify({ kind: 'normalizer', config: n, input: s, output: norm.normalizeString(s) }));
    }
    for (const p of pres) {
      const t = hf.Tokenizer.fromString(JSON.stringify(wrap({ pre_tokenizer: p })));
      const pre = t.getPreTokenizer();
      for (const s of strs) out.push(JSON.stringify({ kind: 'pre_tokenizer', config: p, input: s, output: pre.preTokenizeString(s) }));
    }
    for (const d of decoders) {
      const t = hf.Tokenizer.fromString(JSON.stringify(wrap({ decoder: d })));
      const dec = t.getDecoder();
      for (const toks of tokenLists) out.push(JSON.stringify({ kind: 'decoder', config: d, input: toks, output: dec.decode(toks) }));
    }
    fs.writeFileSync(path.join(outDir, 'components.jsonl'), out.join('\n') + '\n');
  }

  fs.writeFileSync(path.join(outDir, 'manifest.json'), JSON.stringify(manifest, null, 1));
  console.log(`reference: ${inputs.length} inputs, ${manifest.length} tokenizers -> ${outDir}`);
}

main().catch((e) => { console.error(e); process.exit(1); });

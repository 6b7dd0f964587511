// Checks that HF tokenizers (Node) loads every tokenizer.json Foundry saved (round trips of all
// reference tokenizers and the trainer's output) and encodes the test inputs exactly as Foundry
// does with the same file: ids, tokens, offsets and decoded text.
// usage: node verify_saved.js <npm_dir> <ref_dir>; exits 77 (CTest's skip) without references.
'use strict';
const fs = require('fs');
const path = require('path');
const [npmDir, refDir] = process.argv.slice(2);
if (!fs.existsSync(path.join(path.resolve(refDir), 'inputs.jsonl'))) {
  // text_reference skipped (a clone without ../shared/data): nothing to compare. CTest's skip code.
  console.log('verify_saved.js: SKIPPED: no references in ' + refDir + ' (../shared/data is absent)');
  process.exit(77);
}
const hf = require(path.resolve(npmDir, 'node_modules', 'tokenizers'));
const savedDir = path.join(path.resolve(refDir), 'saved');
const inputs = fs.readFileSync(path.join(path.resolve(refDir), 'inputs.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l).text);

async function main() {
  const files = fs.readdirSync(savedDir).filter((f) => f.endsWith('.tokenizer.json')).sort();
  if (!files.length) throw new Error('no saved tokenizers in ' + savedDir);
  let failed = 0;
  for (const f of files) {
    const name = f.replace('.tokenizer.json', '');
    const meta = JSON.parse(fs.readFileSync(path.join(savedDir, name + '.meta.json'), 'utf8'));
    const expected = fs.readFileSync(path.join(savedDir, name + '.expected.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    const tok = hf.Tokenizer.fromFile(path.join(savedDir, f));
    let same = 0;
    const shown = [];
    for (let i = 0; i < inputs.length; i += 256) {
      const encs = await tok.encodeBatch(inputs.slice(i, i + 256), { addSpecialTokens: meta.add_special });
      const decs = await tok.decodeBatch(encs.map((e) => e.getIds()), false);
      encs.forEach((e, k) => {
        const x = expected[i + k];
        const ok = JSON.stringify(e.getIds()) === JSON.stringify(x.ids) && JSON.stringify(e.getTokens()) === JSON.stringify(x.tokens) &&
          JSON.stringify(e.getOffsets()) === JSON.stringify(x.offsets) && decs[k] === x.decode;
        if (ok) same++;
        else if (shown.length < 2) shown.push(`  line ${i + k}: ${JSON.stringify(inputs[i + k]).slice(0, 80)}\n    HF ${JSON.stringify(e.getIds()).slice(0, 200)}\n    Foundry ${JSON.stringify(x.ids).slice(0, 200)}`);
      });
    }
    console.log(`HF loads ${name}: ${same}/${inputs.length} lines identical`);
    if (same !== inputs.length) { failed++; console.log(shown.join('\n')); }
  }
  console.log(`${files.length - failed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}
main().catch((e) => { console.error(e); process.exit(1); });

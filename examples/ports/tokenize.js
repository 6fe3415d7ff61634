// A GPT-2 tokenizer in JavaScript, checked against a tokenizer golden file:
//   node tokenize.js encoder.json vocab.bpe tokenizer.json port.json
const fs = require("fs");
const [encoderPath, mergesPath, goldenPath, outPath] = process.argv.slice(2);
const encoder = JSON.parse(fs.readFileSync(encoderPath, "utf8"));
const decoder = Object.fromEntries(Object.entries(encoder).map(([t, i]) => [i, t]));
const ranks = new Map(fs.readFileSync(mergesPath, "utf8").split("\n").slice(1)
  .filter((l) => l).map((l, i) => [l, i]));                // "left right" -> rank
const byteToChar = [], charToByte = {};                     // the byte-to-unicode table
for (let b = 0, extra = 0; b < 256; b++) {
  const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
  byteToChar[b] = String.fromCodePoint(printable ? b : 256 + extra++);
  charToByte[byteToChar[b]] = b;
}
const pattern = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;

function bpe(text) {  // one piece: its symbols, merges (rank by rank), tokens and ids
  let symbols = Array.from(Buffer.from(text, "utf8"), (b) => byteToChar[b]);
  const piece = { text, symbols: [...symbols], merges: [] };
  for (;;) {
    let best = null;
    for (let i = 0; i + 1 < symbols.length; i++) {
      const r = ranks.get(symbols[i] + " " + symbols[i + 1]);
      if (r !== undefined && (best === null || r < best.rank)) best = { rank: r, i };
    }
    if (best === null) break;
    const [left, right] = [symbols[best.i], symbols[best.i + 1]];
    piece.merges.push([best.rank, left, right]);
    const merged = [];
    for (let i = 0; i < symbols.length; i++) {
      if (symbols[i] === left && symbols[i + 1] === right) merged.push(left + right), i++;
      else merged.push(symbols[i]);
    }
    symbols = merged;
  }
  return { ...piece, tokens: symbols, ids: symbols.map((s) => encoder[s]) };
}

function tokenize(c) {
  if (c.decode) {  // ids -> bytes -> text, invalid UTF-8 as U+FFFD
    const bytes = Buffer.from(c.decode.flatMap((i) => Array.from(decoder[i], (ch) => charToByte[ch])));
    return { bytes: bytes.toString("hex"), text: new TextDecoder().decode(bytes) };
  }
  const special = new RegExp(`(${c.allowed_special.map((s) => s.replace(/[|]/g, "\\|")).join("|")})`);
  const parts = c.allowed_special.length ? c.text.split(special) : [c.text];
  const pieces = parts.flatMap((part) => c.allowed_special.includes(part)
    ? [{ text: part, tokens: [part], ids: [encoder[part]] }]
    : Array.from(part.matchAll(pattern), (m) => bpe(m[0])));
  return { text: c.text, pieces, ids: pieces.flatMap((p) => p.ids) };
}

const golden = JSON.parse(fs.readFileSync(goldenPath, "utf8"));
fs.writeFileSync(outPath, JSON.stringify({ cases: golden.cases.map(tokenize) }));

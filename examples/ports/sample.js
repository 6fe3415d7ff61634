// Every tensor of a golden file, read where the manifest says: any file size (fs.readFileSync
// refuses files over 2 GiB; a 124M dump at T = 1024 is 2.2 GB in float32, 4.4 GB in float64).
const fs = require("fs");

function openGolden(path) {
  const fd = fs.openSync(path, "r");
  const read = (position, length) => {  // length bytes at byte position of the file
    const buf = Buffer.alloc(length);
    for (let done = 0; done < length; ) {
      const n = fs.readSync(fd, buf, done, Math.min(length - done, 1 << 30), position + done);
      if (n === 0) throw new Error(`${path}: ends before byte ${position + length}`);
      done += n;
    }
    return buf;
  };
  const local = read(0, 30);  // the manifest's ZIP local header, always first
  const npy = 30 + local.readUInt16LE(26) + local.readUInt16LE(28);
  const headerLength = read(npy + 8, 2).readUInt16LE(0);  // .npy version 1.0
  const header = read(npy + 10, headerLength).toString("latin1");
  const n = Number(/'shape': \((\d+),/.exec(header)[1]);
  const manifest = JSON.parse(read(npy + 10 + headerLength, n).toString("utf8"));
  const arrays = { float32: Float32Array, float64: Float64Array, int64: BigInt64Array };
  const tensor = (name) => {  // a typed array over the tensor's bytes (C order)
    const t = manifest.tensors.find((t) => t.name === name);
    const bytes = read(t.offset, t.nbytes);  // Buffer.alloc: byteOffset 0, so aligned
    const Type = arrays[t.dtype];
    return new Type(bytes.buffer, bytes.byteOffset, t.nbytes / Type.BYTES_PER_ELEMENT);
  };
  return { manifest, tensor, close: () => fs.closeSync(fd) };
}

// A sampler in JavaScript, checked against a sampler golden file (with openGolden above):
//   node sample.js sampler.npz port/      then      gpt2np compare sampler.npz port/
const [goldenPath, outDir] = process.argv.slice(2);
const g = openGolden(goldenPath);
const s = g.manifest.setting, [steps, V] = [g.manifest.steps, g.manifest.n_vocab];
const logits = g.tensor("logits"), u = g.tensor("u"), golden = g.tensor("chosen");
const history = Array.from(g.tensor("prompt_ids"), Number);
const nPrompt = history.length;
const softmax = (z) => {
  const top = Math.max(...z.filter(Number.isFinite)), e = z.map((x) => Math.exp(x - top));
  const sum = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / sum);
};
const probs = new Float64Array(steps * V), chosen = new BigInt64Array(steps);
for (let i = 0; i < steps; i++) {
  let z = Array.from(logits.subarray(i * V, (i + 1) * V));
  for (const j of new Set(history))                     // repetition penalty (CTRL, HF)
    z[j] = z[j] > 0 ? z[j] / s.repetition_penalty : z[j] * s.repetition_penalty;
  const counts = {};
  for (const j of history.slice(nPrompt)) counts[j] = (counts[j] || 0) + 1;
  for (const [j, c] of Object.entries(counts))          // presence and frequency (OpenAI)
    z[j] -= c * s.frequency_penalty + s.presence_penalty;
  if (s.temperature === 0) {                            // greedy: the first argmax, no filter
    const best = z.indexOf(Math.max(...z));             // (never divide by 0: z / 0 is ±inf)
    z = z.map((x, j) => (j === best ? 0 : -Infinity));
  } else {
    z = z.map((x) => x / s.temperature);                // temperature first
    const sorted = [...z].sort((a, b) => b - a);
    if (s.top_k > 0) z = z.map((x) => (x < sorted[s.top_k - 1] ? -Infinity : x));
    if (s.top_p < 1) {                                  // keep while the mass before < top_p
      const desc = [...z].sort((a, b) => b - a), p = softmax(desc);
      let k = 0;
      for (let before = 0; k < V && before < s.top_p; k++) before += p[k];
      z = z.map((x) => (x < desc[k - 1] ? -Infinity : x));
    }
    if (s.min_p > 0) {
      const p = softmax(z), floor = s.min_p * Math.max(...p);
      z = z.map((x, j) => (p[j] < floor ? -Infinity : x));
    }
  }
  const p = softmax(z);
  probs.set(p, i * V);
  let cdf = 0, pick = -1, total = p.reduce((a, b) => a + b, 0);
  for (let j = 0; j < V && pick < 0; j++) if ((cdf += p[j]) > u[i] * total) pick = j;
  chosen[i] = BigInt(pick);
  history.push(Number(golden[i]));                      // the history goes on with the golden's
}
const writeNpy = (name, array, descr, shape) => {      // a version 1.0 .npy, 128-byte header
  let h = `{'descr': '${descr}', 'fortran_order': False, 'shape': (${shape.join(", ")},), }`;
  h = h.padEnd(117) + "\n";
  const head = Buffer.concat([Buffer.from([0x93]), Buffer.from("NUMPY\x01\x00"),
                              Buffer.from([h.length, 0]), Buffer.from(h, "latin1")]);
  fs.writeFileSync(`${outDir}/${name}.npy`, Buffer.concat([head, Buffer.from(array.buffer)]));
};
writeNpy("probs", probs, "<f8", [steps, V]);
writeNpy("chosen", chosen, "<i8", [steps]);

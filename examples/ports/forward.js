// A GPT-2 forward pass in JavaScript with a KV cache and left padding, no library: Float32Array
// storage, the weights read from HF's model.safetensors. For `gpt2np check-port`
// (docs/golden-files.md, "Checking a port"): run(spec) reads a forward case's case.json and writes
// every traced tensor, under gpt2np's names, as NAME.npy into spec.out.
const fs = require("fs");
const path = require("path");

function readSafetensors(file) {  // an 8-byte length, a JSON header, raw little-endian data
  const buf = fs.readFileSync(file);  // whole: up to 2 GiB, 355M in float32 (read larger by parts)
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.toString("utf8", 8, 8 + n));
  const weights = {};
  for (const [name, t] of Object.entries(header)) {
    if (name === "__metadata__") continue;
    if (t.dtype !== "F32") throw new Error(`${name}: dtype ${t.dtype}, this port reads F32`);
    const [start, end] = t.data_offsets;  // copied: a Float32Array needs a 4-byte aligned offset
    const bytes = buf.buffer.slice(buf.byteOffset + 8 + n + start, buf.byteOffset + 8 + n + end);
    weights[name.replace(/^transformer\./, "")] = new Float32Array(bytes);
  }
  return weights;
}

// x [n, D] -> [n, D]: (x - mean) / sqrt(var + 1e-5) * g + b, per row
function layerNorm(x, n, D, g, b) {
  const y = new Float32Array(n * D);
  for (let t = 0; t < n; t++) {
    const row = x.subarray(t * D, (t + 1) * D);
    let mean = 0, v = 0;
    for (let i = 0; i < D; i++) mean += row[i];
    mean /= D;
    for (let i = 0; i < D; i++) v += (row[i] - mean) ** 2;
    const r = 1 / Math.sqrt(v / D + 1e-5);
    for (let i = 0; i < D; i++) y[t * D + i] = (row[i] - mean) * r * g[i] + b[i];
  }
  return y;
}

// x [n, nIn] · W [nIn, nOut] + bias [nOut] (HF's Conv1D layout)
function linear(x, n, nIn, W, bias, nOut) {
  const y = new Float32Array(n * nOut), acc = new Float64Array(nOut);
  for (let t = 0; t < n; t++) {
    acc.set(bias);
    for (let i = 0; i < nIn; i++) {
      const xi = x[t * nIn + i], w = i * nOut;
      for (let j = 0; j < nOut; j++) acc[j] += xi * W[w + j];
    }
    y.set(acc, t * nOut);
  }
  return y;
}

const gelu = (x) => x.map((v) => 0.5 * v * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (v + 0.044715 * v ** 3))));

// One row through the model: `ids` new tokens after what `cache` holds (per layer, keys and
// values [H][S][Dh]). record(name, t, values, h, s) receives every intermediate of new token t.
function step(w, hp, cache, ids, record) {
  const { n_embd: D, n_head: H, n_layer: L, n_vocab: V } = hp, Dh = D / H, T = ids.length;
  const past = cache[0].k[0].length;
  let x = new Float32Array(T * D);
  for (let t = 0; t < T; t++) {
    const tok = w["wte.weight"].subarray(ids[t] * D, (ids[t] + 1) * D);
    const pos = w["wpe.weight"].subarray((past + t) * D, (past + t + 1) * D);
    for (let i = 0; i < D; i++) x[t * D + i] = tok[i] + pos[i];
    record("embed.tokens", t, tok); record("embed.positions", t, pos);
  }
  const each = (name, a, width) => { for (let t = 0; t < T; t++) record(name, t, a.subarray(t * width, (t + 1) * width)); };
  each("embed.sum", x, D);
  for (let l = 0; l < L; l++) {
    const p = (name) => w[`h.${l}.${name}`], at = (name) => `h${l}.${name}`;
    const ln1 = layerNorm(x, T, D, p("ln_1.weight"), p("ln_1.bias"));
    const qkv = linear(ln1, T, D, p("attn.c_attn.weight"), p("attn.c_attn.bias"), 3 * D);
    each(at("ln_1"), ln1, D); each(at("attn.qkv"), qkv, 3 * D);
    const head = (t, part, h) => qkv.subarray(t * 3 * D + part * D + h * Dh, t * 3 * D + part * D + (h + 1) * Dh);
    for (let h = 0; h < H; h++) for (let t = 0; t < T; t++) {  // append the step's keys and values
      cache[l].k[h].push(head(t, 1, h)); cache[l].v[h].push(head(t, 2, h));
      record(at("attn.q"), t, head(t, 0, h), h); record(at("attn.k"), t, head(t, 1, h), h);
      record(at("attn.v"), t, head(t, 2, h), h);
    }
    const merged = new Float32Array(T * D), S = past + T;
    for (let h = 0; h < H; h++) for (let t = 0; t < T; t++) {
      const q = head(t, 0, h), scores = new Float32Array(S), probs = new Float32Array(S);
      for (let s = 0; s < S; s++) {
        let dot = 0;
        for (let d = 0; d < Dh; d++) dot += q[d] * cache[l].k[h][s][d];
        scores[s] = dot / Math.sqrt(Dh);
      }
      const seen = past + t + 1;  // the causal mask: key s <= past + t
      let top = -Infinity, sum = 0;
      for (let s = 0; s < seen; s++) top = Math.max(top, scores[s]);
      for (let s = 0; s < seen; s++) sum += (probs[s] = Math.exp(scores[s] - top));
      for (let s = 0; s < seen; s++) probs[s] /= sum;
      for (let d = 0; d < Dh; d++) {
        let acc = 0;
        for (let s = 0; s < seen; s++) acc += probs[s] * cache[l].v[h][s][d];
        merged[t * D + h * Dh + d] = acc;
      }
      record(at("attn.scores"), t, scores, h, true); record(at("attn.probs"), t, probs, h, true);
    }
    const attn = linear(merged, T, D, p("attn.c_proj.weight"), p("attn.c_proj.bias"), D);
    const mid = x.map((v, i) => v + attn[i]);
    const ln2 = layerNorm(mid, T, D, p("ln_2.weight"), p("ln_2.bias"));
    const fc = linear(ln2, T, D, p("mlp.c_fc.weight"), p("mlp.c_fc.bias"), 4 * D), g = gelu(fc);
    const mlp = linear(g, T, 4 * D, p("mlp.c_proj.weight"), p("mlp.c_proj.bias"), D);
    x = mid.map((v, i) => v + mlp[i]);
    each(at("attn.merged"), merged, D); each(at("attn.c_proj"), attn, D);
    each(at("resid_mid"), mid, D); each(at("ln_2"), ln2, D); each(at("mlp.c_fc"), fc, 4 * D);
    each(at("mlp.gelu"), g, 4 * D); each(at("mlp.c_proj"), mlp, D); each(at("out"), x, D);
  }
  const lnf = layerNorm(x, T, D, w["ln_f.weight"], w["ln_f.bias"]);
  const wteT = new Float32Array(D * V);  // the tied head: logits = ln_f · wteᵀ
  for (let v = 0; v < V; v++) for (let i = 0; i < D; i++) wteT[i * V + v] = w["wte.weight"][v * D + i];
  each("ln_f", lnf, D); each("logits", linear(lnf, T, D, wteT, new Float32Array(V), V), V);
}

function writeNpy(file, data, shape) {  // a version 1.0 .npy of float32, 128-byte header
  let h = `{'descr': '<f4', 'fortran_order': False, 'shape': (${shape.join(", ")},), }`;
  h = h.padEnd(117) + "\n";
  const head = Buffer.concat([Buffer.from([0x93]), Buffer.from("NUMPY\x01\x00"),
                              Buffer.from([h.length, 0]), Buffer.from(h, "latin1")]);
  fs.writeFileSync(file, Buffer.concat([head, Buffer.from(data.buffer)]));
}

// A case: rows left-padded by pad[b]; the first T_past columns the prefix. Each row runs alone
// on its real tokens (positions 0, 1, ...) and its tensors are placed after its padding.
function run(spec) {
  const hp = spec.model.hparams, w = readSafetensors(spec.model.safetensors);
  const B = spec.ids.length, T = spec.ids[0].length, P = spec.T_past, S = P + T;
  const H = hp.n_head, out = {};
  for (let b = 0; b < B; b++) {
    const pad = spec.pad ? spec.pad[b] : 0;
    const row = [...(spec.prefix_ids ? spec.prefix_ids[b] : []), ...spec.ids[b]].slice(pad);
    const nPrefix = Math.max(0, P - pad), first = T - (row.length - nPrefix);  // first real column
    const cache = Array.from({ length: hp.n_layer }, () => ({
      k: Array.from({ length: H }, () => []), v: Array.from({ length: H }, () => []) }));
    if (nPrefix) step(w, hp, cache, row.slice(0, nPrefix), () => {});
    if (P) {  // the cache after the prefix: past [B, L, 2, H, T_past, Dh], real key s at pad + s
      const Dh = hp.n_embd / H, L = hp.n_layer;
      out.past ??= { shape: [B, L, 2, H, P, Dh], data: new Float32Array(B * L * 2 * H * P * Dh) };
      for (let l = 0; l < L; l++) for (let kv = 0; kv < 2; kv++) for (let h = 0; h < H; h++)
        for (let s = 0; s < nPrefix; s++)
          out.past.data.set(cache[l][kv ? "v" : "k"][h][s], ((((b * L + l) * 2 + kv) * H + h) * P + pad + s) * Dh);
    }
    step(w, hp, cache, row.slice(nPrefix), (name, t, values, h, keys) => {
      const width = keys ? S : values.length, heads = h === undefined ? 1 : H;
      const shape = h === undefined ? [B, T, width] : [B, H, T, width];
      out[name] ??= { shape, data: new Float32Array(B * heads * T * width) };
      const at = ((b * heads + (h ?? 0)) * T + first + t) * width + (keys ? pad : 0);
      out[name].data.set(values, at);  // keys: real key s at padded index pad + s
    });
  }
  for (const [name, t] of Object.entries(out)) writeNpy(path.join(spec.out, `${name}.npy`), t.data, t.shape);
}

module.exports = { run, readSafetensors };

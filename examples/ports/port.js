// A GPT-2 port in JavaScript (node, no npm package) for `gpt2np check-port`:
//   gpt2np check-port --model DIR --suite full -- node examples/ports/port.js
// gpt2np runs `node port.js CASE_DIR` once per case; CASE_DIR/case.json says what to do, and the
// outputs go into CASE_DIR/port/ (docs/golden-files.md, "Checking a port"). The forward pass is
// forward.js; the tokenizer (tokenize.js) and the sampler (sample.js) are the page's own blocks,
// run as the page runs them.
const fs = require("fs");
const path = require("path");
const { execFileSync } = require("child_process");

const SUITE_VERSIONS = [1];  // the suite versions this port knows
const caseDir = process.argv[2];
const spec = JSON.parse(fs.readFileSync(path.join(caseDir, "case.json"), "utf8"));
if (!SUITE_VERSIONS.includes(spec.suite_version)) {
  console.error(`port.js: suite version ${spec.suite_version} is not one I know (${SUITE_VERSIONS})`);
  process.exit(2);
}
const script = (name, ...args) =>
  execFileSync(process.execPath, [path.join(__dirname, name), ...args], { stdio: "inherit" });
if (spec.kind === "forward") require("./forward.js").run(spec);
else if (spec.kind === "tokenizer")
  script("tokenize.js", spec.vocabulary.encoder, spec.vocabulary.merges, spec.golden,
         path.join(spec.out, "port.json"));
else if (spec.kind === "sampler") script("sample.js", spec.golden, spec.out);
else {
  console.error(`port.js: unknown case kind ${spec.kind}`);
  process.exit(2);
}

// Compile the Solidity sources in this folder with the pinned npm `solc` package (see the root
// package.json) and write one JSON artifact per contract: ABI, creation bytecode, compiler version
// and the source's SHA-256. Artifacts go beside the sources (contracts/artifacts/) and into the
// `sail` package (sail/contracts/), which loads them at run time.
//
// Usage, from the repo root:  npm ci && node contracts/compile.mjs
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const solc = require("solc");
const here = dirname(fileURLToPath(import.meta.url));
// SOLC_OUT_DIR (used by the tests) writes the artifacts there instead, to compare with the committed ones.
const outDirs = process.env.SOLC_OUT_DIR
  ? [process.env.SOLC_OUT_DIR]
  : [join(here, "artifacts"), join(here, "..", "sail", "contracts")];

const sources = {};
for (const file of readdirSync(here).filter((f) => f.endsWith(".sol")).sort()) {
  sources[file] = { content: readFileSync(join(here, file), "utf8") };
}
const input = {
  language: "Solidity",
  sources,
  settings: {
    optimizer: { enabled: true, runs: 200 },
    evmVersion: "paris",
    outputSelection: { "*": { "*": ["abi", "evm.bytecode.object"] } },
  },
};
const output = JSON.parse(solc.compile(JSON.stringify(input)));
const errors = (output.errors || []).filter((e) => e.severity === "error");
for (const e of output.errors || []) console.error(e.formattedMessage);
if (errors.length) process.exit(1);

for (const dir of outDirs) mkdirSync(dir, { recursive: true });
for (const [file, contracts] of Object.entries(output.contracts)) {
  const sourceSha256 = createHash("sha256").update(sources[file].content).digest("hex");
  for (const [name, c] of Object.entries(contracts)) {
    if (!c.evm.bytecode.object) continue; // interfaces have no bytecode
    const artifact = {
      contractName: name,
      sourceName: file,
      sourceSha256,
      compiler: `solc ${solc.version()}`,
      abi: c.abi,
      bytecode: "0x" + c.evm.bytecode.object,
    };
    const text = JSON.stringify(artifact, null, 2) + "\n";
    for (const dir of outDirs) writeFileSync(join(dir, `${name}.json`), text);
    console.log(`compiled ${file}:${name}`);
  }
}

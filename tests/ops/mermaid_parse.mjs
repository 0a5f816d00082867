// Parse Mermaid files with mermaid's own parser (the package's `mermaid.parse`), in Node with a
// jsdom window for the DOMPurify it loads; one Node process for every file named (loading mermaid
// is most of the time). Prints one JSON line per file, {"file", "ok", "error"}; exit 0 when every
// file parses, 1 otherwise.
import { readFileSync } from "node:fs";
import { JSDOM } from "jsdom";

const dom = new JSDOM("<!doctype html><html><body></body></html>");
globalThis.window = dom.window;
globalThis.document = dom.window.document;
const { default: mermaid } = await import("mermaid");
let failed = false;
for (const file of process.argv.slice(2)) {
  try {
    await mermaid.parse(readFileSync(file, "utf8"));
    console.log(JSON.stringify({ file, ok: true, error: "" }));
  } catch (error) {
    failed = true;
    const message = String(error.message || error).split("\n").slice(0, 4).join(" | ");
    console.log(JSON.stringify({ file, ok: false, error: message }));
  }
}
process.exit(failed ? 1 : 0);

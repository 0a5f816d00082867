// Parse a Mermaid file with mermaid's own parser (the package's `mermaid.parse`), in Node with a
// jsdom window for the DOMPurify it loads. Exit 0 when it parses, 1 with the parser's message.
import { readFileSync } from "node:fs";
import { JSDOM } from "jsdom";

const dom = new JSDOM("<!doctype html><html><body></body></html>");
globalThis.window = dom.window;
globalThis.document = dom.window.document;
const { default: mermaid } = await import("mermaid");
try {
  await mermaid.parse(readFileSync(process.argv[2], "utf8"));
} catch (error) {
  console.error(String(error.message || error).split("\n").slice(0, 4).join(" | "));
  process.exit(1);
}

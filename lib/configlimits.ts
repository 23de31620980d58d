// Bounds on the cloud-config input (and on validate's node metadata), so that no file up to the
// ConfigMap size limit (a YAML alias bomb, 100,000 nested brackets, a million tiny nodes, a megabyte
// of double-quoted text, thousands of regexps) can stall the process or exhaust its memory. Pure
// checks on the text: the file itself is read within the size limit by lib/configfile.ts. The YAML
// is lexed and parsed with bounds on tokens, nesting and double-quoted text before any node is
// built, and only its first document is composed; regexps and templates are compiled against a
// budget. Each refusal names its cause. tests/support/config-stress.ts measures the worst files
// these bounds let through.

import { Composer, type CST, type Document, Lexer, LineCounter, Parser } from "yaml";
import type { ConfigIssue } from "./configissue.ts";

/** Largest cloud-config file accepted, in bytes: the size limit of a ConfigMap. */
export const MAX_CONFIG_BYTES = 1_048_576;

/**
 * Most YAML tokens in a file: keys, values, indicators, indentation, comments and line breaks
 * (including those inside multi-line values), as {@link yamlTokens} counts them. The YAML library
 * builds objects for each; past a few thousand, most of the peak memory (~10 MiB) is the JIT
 * compiling its lexer and parser. The largest file in rules/ has 454 tokens, a realistic rule
 * (selector on two keys, a label, a taint) about 110.
 */
export const MAX_YAML_TOKENS = 10_000;

/** Deepest nesting of YAML collections; a cloud config needs 9 levels. */
export const MAX_YAML_DEPTH = 64;

/**
 * Most characters of double-quoted scalars in a file: the YAML library decodes them one character at a
 * time, at about 40 bytes of memory per character. Single-quoted, plain and block scalars cost
 * next to nothing.
 */
export const MAX_DOUBLE_QUOTED_CHARS = 131_072;

/** Most YAML nodes visited after alias expansion; bounds "billion laughs" documents. */
export const MAX_YAML_NODES = 100_000;

/**
 * Most regexps and templates compiled from one file: each costs 20 to 40 KiB of memory while it is
 * compiled. The rule sets in rules/ have about two dozen in all.
 */
export const MAX_COMPILED = 200;

/**
 * Most characters of regexp and template source compiled from one file: a compiled regexp costs
 * about 0.5 KiB of memory per instruction, and each source character can make one.
 */
export const MAX_COMPILED_CHARS = 16_384;

/** The input breaks one of the bounds; `issue` says which, and where when known. */
export class ConfigLimitError extends Error {
  constructor(readonly issue: ConfigIssue) {
    super(issue.message);
    this.name = "ConfigLimitError";
  }
}

/** What a bounded file holds, for the message when it is too large. */
export type BoundedInput = "config" | "node metadata" | "machine config";

/** The size limit of each bounded input, and why. */
export const INPUT_LIMITS: Readonly<Record<BoundedInput, { bytes: number; reason: string }>> = {
  config: { bytes: MAX_CONFIG_BYTES, reason: "1 MiB, the size limit of a ConfigMap" },
  "node metadata": { bytes: MAX_CONFIG_BYTES, reason: "1 MiB, a node's metadata from talosctl is a few KiB" },
  "machine config": { bytes: 33_554_432, reason: "32 MiB, the largest message Talos' API takes" },
};

/**
 * The refusal of an input larger than its limit in {@link INPUT_LIMITS}.
 * @param what the input's description, with its size when known: "the file (2000000 bytes)".
 * @param input what the input holds, named in the reason.
 */
export function tooLarge(what: string, input: BoundedInput): ConfigLimitError {
  return new ConfigLimitError({
    path: "",
    message: `${what} is larger than ${INPUT_LIMITS[input].bytes} bytes (${INPUT_LIMITS[input].reason})`,
  });
}

/** The first YAML document of a file, and what follows it. */
export interface FirstDocument {
  /** Undefined when the file holds no document (empty, or only comments). */
  doc: Document.Parsed | undefined;
  /** How many more documents follow (they are not composed). */
  more: number;
  /** Offset where the second document's content starts, when there is one. */
  moreOffset: number | undefined;
}

/**
 * Parses the first YAML document of `text` within the bounds: the size, then, token by token as the
 * parser reads them, {@link MAX_YAML_TOKENS}, {@link MAX_YAML_DEPTH} and
 * {@link MAX_DOUBLE_QUOTED_CHARS}. Nothing is composed until the whole stream passed, so a refused
 * input costs only its tokens. Later documents are parsed (to be counted) but not composed.
 * @param lines receives the line starts, for positions.
 * @throws {ConfigLimitError} naming the bound and the line where it was passed.
 */
export function parseFirstDocument(text: string, lines: LineCounter): FirstDocument {
  const first: CST.Token[] = [];
  let documents = 0;
  let moreOffset: number | undefined;
  // Keeps what comes up to the first document, and counts the documents after it.
  parseBounded(text, lines, "config", Number.POSITIVE_INFINITY, (token) => {
    if (token.type === "document" && ++documents === 2) moreOffset = token.value?.offset;
    if (documents === 0 || (documents === 1 && token.type === "document")) first.push(token);
  });
  const composer = new Composer({ merge: true });
  let doc: Document.Parsed | undefined;
  for (const token of first) for (const d of composer.next(token)) doc ??= d;
  for (const d of composer.end()) doc ??= d;
  return { doc, more: Math.max(0, documents - 1), moreOffset };
}

/**
 * Most YAML documents in a node metadata file: talosctl prints one per resource, and a sample node
 * needs two (PlatformMetadata, SystemInformation).
 */
export const MAX_METADATA_DOCUMENTS = 16;

/**
 * Checks node metadata against the same bounds as a config ({@link MAX_CONFIG_BYTES},
 * {@link MAX_YAML_TOKENS}, {@link MAX_YAML_DEPTH}, {@link MAX_DOUBLE_QUOTED_CHARS}) and at most
 * {@link MAX_METADATA_DOCUMENTS} documents, before any of it is composed.
 * @throws {ConfigLimitError} naming the bound and the line where it was passed.
 */
export function checkMetadataBounds(text: string): void {
  parseBounded(text, new LineCounter(), "node metadata", MAX_METADATA_DOCUMENTS, () => {});
}

/**
 * Runs the YAML lexer and parser over `text`, refusing it as soon as it passes a bound, and hands
 * each CST token to `each`.
 */
function parseBounded(
  text: string,
  lines: LineCounter,
  input: BoundedInput,
  maxDocuments: number,
  each: (token: CST.Token) => void,
): void {
  // A string's length in UTF-16 units is at least its UTF-8 length divided by 3: skip the count when small.
  if (text.length * 3 > MAX_CONFIG_BYTES && Buffer.byteLength(text, "utf8") > MAX_CONFIG_BYTES) {
    throw tooLarge(`the ${input}`, input);
  }
  const parser = new Parser(lines.addNewLine);
  lines.addNewLine(0);
  let tokens = 0;
  let doubleQuoted = 0;
  let documents = 0;
  const refuse = (message: string, offset = parser.offset): never => {
    throw new ConfigLimitError({ path: "", line: lines.linePos(offset).line, message });
  };
  const take = (token: CST.Token) => {
    if (token.type === "document" && ++documents > maxDocuments) {
      refuse(`more than ${maxDocuments} YAML documents: give one node's metadata`, token.offset);
    }
    each(token);
  };
  for (const lexeme of new Lexer().lex(text)) {
    tokens += yamlTokens(lexeme);
    if (tokens > MAX_YAML_TOKENS) {
      refuse(
        `more than ${MAX_YAML_TOKENS} YAML tokens (keys, values, indicators, indentation, comments and line breaks)`,
      );
    }
    if (lexeme.startsWith('"')) {
      doubleQuoted += lexeme.length;
      if (doubleQuoted > MAX_DOUBLE_QUOTED_CHARS) {
        refuse(
          `more than ${MAX_DOUBLE_QUOTED_CHARS} characters of double-quoted text: write long values single-quoted or as block scalars (|)`,
        );
      }
    }
    for (const token of parser.next(lexeme)) take(token);
    if (parser.stack.length > MAX_YAML_DEPTH) refuse(`YAML nesting deeper than ${MAX_YAML_DEPTH} levels`);
  }
  for (const token of parser.end()) take(token);
}

/**
 * The tokens one lexeme of the YAML lexer counts for against {@link MAX_YAML_TOKENS}: one, plus
 * one per line break inside a multi-line value (each costs the YAML library as much as a token).
 * @example yamlTokens("a\n  b") // 2
 */
export function yamlTokens(lexeme: string): number {
  if (lexeme.length < 2 || lexeme === "\r\n") return 1;
  let n = 1;
  for (let i = lexeme.indexOf("\n"); i !== -1; i = lexeme.indexOf("\n", i + 1)) n++;
  return n;
}

/**
 * The budget for compiling regexps and templates from one file: {@link MAX_COMPILED} of them,
 * {@link MAX_COMPILED_CHARS} characters of source in all.
 */
export class CompileBudget {
  #count = 0;
  #chars = 0;
  #exceeded = false;

  /**
   * Spends the budget on one regexp or template.
   * @returns undefined when it may be compiled; the reason the first time it may not; "" after that.
   */
  spend(source: string): string | undefined {
    if (this.#exceeded) return "";
    this.#count++;
    this.#chars += source.length;
    if (this.#count <= MAX_COMPILED && this.#chars <= MAX_COMPILED_CHARS) return undefined;
    this.#exceeded = true;
    return this.#count > MAX_COMPILED
      ? `more than ${MAX_COMPILED} regexps and templates in the file`
      : `more than ${MAX_COMPILED_CHARS} characters of regexps and templates in the file`;
  }
}

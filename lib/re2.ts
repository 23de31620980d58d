// Go regular expressions (RE2 syntax, as Go's `regexp.Compile` accepts it) on JavaScript: the public
// API. compileRegex returns a RegExp whose `source` is the equivalent JavaScript pattern and whose
// matching is done by a linear-time matcher with Go's semantics and RE2's guarantee; Go's `$`
// expansion and ReplaceAllString. Parsing: re2parse.ts and re2classes.ts; translation: re2translate.ts;
// matching: re2vm.ts.

import { parseRegex, RegexError } from "./re2parse.ts";
import { jsSource } from "./re2translate.ts";
import { checkWork, compileProgram, type Program, runProgram } from "./re2vm.ts";

export { RegexError } from "./re2parse.ts";
export { MAX_REGEX_WORK } from "./re2vm.ts";

/** Largest string replaceAll builds. */
const MAX_REPLACE_OUTPUT = 1 << 20;

/** Builds the JavaScript exec() result from capture offsets; `groups` gives each Go name its first participating group. */
function execResult(prog: Program, s: string, caps: number[]): RegExpExecArray {
  const values: (string | undefined)[] = [];
  for (let i = 0; i < caps.length; i += 2) {
    const a = caps[i] as number;
    values.push(a < 0 ? undefined : s.slice(a, caps[i + 1]));
  }
  let groups: Record<string, string | undefined> | undefined;
  prog.names.forEach((name, i) => {
    if (name === undefined) return;
    groups ??= Object.create(null) as Record<string, string | undefined>;
    if (groups[name] === undefined) groups[name] = values[i];
  });
  return Object.assign(values, { index: caps[0] as number, input: s, groups }) as RegExpExecArray;
}

/**
 * A RegExp whose matching is done by the linear-time matcher with Go's semantics. Its `source` is
 * the equivalent JavaScript pattern; test(), String.prototype.match/replace/split/matchAll all go
 * through exec(), so every standard use stays linear.
 */
class GoRegExp extends RegExp {
  readonly #prog: Program;

  // RegExp's split() and matchAll() construct copies through Symbol.species as `new C(re, flags)`.
  constructor(pattern: string | GoRegExp, flags: string, prog?: Program) {
    if (!/^[guy]*$/.test(flags)) throw new RegexError(`Cannot copy a Go regexp with flags "${flags}"`);
    super(pattern instanceof GoRegExp ? pattern.source : pattern, flags.includes("u") ? flags : `${flags}u`);
    this.#prog = prog ?? (pattern as GoRegExp).#prog;
  }

  /** The program behind a RegExp from compileRegex, or undefined for any other RegExp. */
  static programOf(re: RegExp): Program | undefined {
    return #prog in re ? re.#prog : undefined;
  }

  override exec(input: string): RegExpExecArray | null {
    const s = String(input);
    const stateful = this.global || this.sticky;
    const start = stateful ? Math.max(0, Math.floor(Number(this.lastIndex)) || 0) : 0;
    if (start > s.length) {
      this.lastIndex = 0;
      return null;
    }
    checkWork(this.#prog, s);
    const caps = runProgram(this.#prog, s, start, this.sticky);
    if (caps === undefined) {
      if (stateful) this.lastIndex = 0;
      return null;
    }
    if (stateful) this.lastIndex = caps[1] as number;
    return execResult(this.#prog, s, caps);
  }
}

/**
 * Translates a Go RE2 pattern to an equivalent JavaScript RegExp (flag "u" always), or throws
 * RegexError saying what cannot be translated safely. Go's own syntax errors keep Go's wording.
 * The result matches in linear time with Go's leftmost-first semantics (including captures inside
 * repetitions, which JavaScript's engine would reset); inputs beyond MAX_REGEX_WORK throw RegexError.
 * @example compileRegex("(?i)^web-(?P<id>\\d+)$").exec("WEB-12")?.groups?.id // "12"
 * @throws RegexError
 */
export function compileRegex(pattern: string): RegExp {
  const { root, names } = parseRegex(pattern);
  const source = jsSource(root, names);
  let prog: Program;
  try {
    prog = compileProgram(root, names, pattern);
    return new GoRegExp(source, "u", prog);
  } catch (cause) {
    if (cause instanceof RegexError) throw cause;
    throw new RegexError(
      `Cannot compile regexp \`${pattern}\`: JavaScript rejected its translation \`${source}\``,
      {
        cause,
      },
    );
  }
}

/**
 * Go's Regexp.Expand: `$1`, `${1}`, `$name`, `${name}` insert a group (empty when it did not
 * participate or does not exist), `$$` is a dollar. A name is the longest run of letters, digits and
 * underscores, so `$1x` means `${1x}`. A `$` not followed by a valid name is kept as is.
 * @example expandTemplate("${1}W", /a(x*)b/u.exec("axxb")!) // "xxW"
 */
export function expandTemplate(template: string, match: RegExpExecArray): string {
  let out = "";
  let i = 0;
  for (;;) {
    const dollar = template.indexOf("$", i);
    if (dollar < 0) break;
    out += template.slice(i, dollar);
    i = dollar + 1;
    if (template[i] === "$") {
      out += "$";
      i++;
      continue;
    }
    const ref = /^(?:\{([\p{L}\p{Nd}_]+)\}|([\p{L}\p{Nd}_]+))/u.exec(template.slice(i));
    if (ref === null) {
      out += "$";
      continue;
    }
    i += ref[0].length;
    out += groupValue(match, (ref[1] ?? ref[2]) as string) ?? "";
  }
  return out + template.slice(i);
}

function groupValue(match: RegExpExecArray, name: string): string | undefined {
  if (/^(?:0|[1-9][0-9]{0,8})$/.test(name)) return match[Number(name)];
  const groups = match.groups;
  return groups !== undefined && Object.hasOwn(groups, name) ? groups[name] : undefined;
}

const globalClones = new WeakMap<RegExp, RegExp>();

/** Finds the leftmost match at or after `pos`. */
function execAt(re: RegExp, src: string, pos: number): RegExpExecArray | null {
  const prog = GoRegExp.programOf(re);
  if (prog !== undefined) {
    const caps = runProgram(prog, src, pos, false);
    return caps === undefined ? null : execResult(prog, src, caps);
  }
  let clone = globalClones.get(re);
  if (clone === undefined) {
    clone = new RegExp(re.source, `${re.flags.replace(/[gy]/g, "")}g`);
    globalClones.set(re, clone);
  }
  clone.lastIndex = pos;
  return clone.exec(src);
}

/**
 * Go's ReplaceAllString: replaces every non-overlapping match with `repl` after `$` expansion. An
 * empty match right after a previous match is not replaced (JavaScript would: "baaac" with `a*` and
 * "-" gives "-b-c-" in Go, "-b--c-" in JavaScript).
 * @throws RegexError when the input is too long for the pattern or the result exceeds 1 MiB.
 */
export function replaceAll(re: RegExp, src: string, repl: string): string {
  const prog = GoRegExp.programOf(re);
  if (prog !== undefined) checkWork(prog, src);
  let out = "";
  let lastEnd = 0;
  let searchPos = 0;
  while (searchPos <= src.length) {
    const m = execAt(re, src, searchPos);
    if (m === null) break;
    const start = m.index;
    const end = start + (m[0] as string).length;
    out += src.slice(lastEnd, start);
    if (end > lastEnd || start === 0) out += expandTemplate(repl, m);
    if (out.length > MAX_REPLACE_OUTPUT) {
      throw new RegexError(
        `Cannot replace with regexp \`${re.source}\`: result exceeds ${MAX_REPLACE_OUTPUT} characters`,
      );
    }
    lastEnd = end;
    const cp = src.codePointAt(searchPos);
    const width = cp === undefined ? 0 : cp > 0xffff ? 2 : 1;
    if (searchPos + width > end) searchPos += width;
    else if (searchPos + 1 > end) searchPos++;
    else searchPos = end;
  }
  return out + src.slice(lastEnd);
}

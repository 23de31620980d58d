// The linear-time matcher behind compileRegex: a parsed pattern (re2parse.ts) is simplified and
// compiled into a program the way Go's regexp/syntax does, so match priorities agree with Go's, and
// run as a Pike VM (as in Go's regexp package): every thread advances in lock step over the input,
// so matching costs input length × program size whatever the pattern. JavaScript's own engine
// backtracks and can take exponential time (`/(a+)+b/` needs seconds on 30 characters).

import { isAlnum, normalizeRanges, type Range, type RangeItem } from "./re2classes.ts";
import { type AssertKind, type Node, RegexError } from "./re2parse.ts";
import { emitAtom } from "./re2translate.ts";

/**
 * Upper bound on matching work, in input characters times program instructions. A pattern of 100
 * instructions matches inputs of up to 200,000 characters; node metadata is far shorter.
 */
export const MAX_REGEX_WORK = 20_000_000;

/** Largest compiled program accepted (Go's own limit is about 3.3 million instructions). */
const MAX_PROGRAM = 50_000;

/** An instruction; `out` and `alt` are indexes of the next instructions. */
type Inst =
  | { op: "char"; test: (cp: number) => boolean; out: number }
  | { op: "split"; out: number; alt: number }
  | { op: "save"; slot: number; out: number }
  | { op: "assert"; kind: AssertKind; out: number }
  | { op: "match" };

/** A compiled pattern, ready for runProgram. */
export interface Program {
  /** The Go pattern, for messages. */
  pattern: string;
  insts: Inst[];
  start: number;
  /** Capture names by group index (index 0 is the whole match). */
  names: (string | undefined)[];
}

/** A character test for a literal, class or dot; JavaScript decides membership for folds and properties. */
function charTest(node: Node & { op: "lit" | "class" | "any" }): (cp: number) => boolean {
  if (node.op === "any") return node.nl ? () => true : (cp) => cp !== 0x0a;
  if (node.op === "lit" && !node.fold) {
    const want = node.cp;
    return (cp) => cp === want;
  }
  if (node.op === "class" && !node.fold && node.items.every((item) => "lo" in item)) {
    const ranges = normalizeRanges(
      node.items.map((item) => [(item as RangeItem).lo, (item as RangeItem).hi]),
    );
    const negated = node.negated;
    return (cp) => {
      let lo = 0;
      let hi = ranges.length - 1;
      while (lo <= hi) {
        const mid = (lo + hi) >> 1;
        const [a, b] = ranges[mid] as Range;
        if (cp < a) hi = mid - 1;
        else if (cp > b) lo = mid + 1;
        else return !negated;
      }
      return negated;
    };
  }
  const re = new RegExp(`^${emitAtom(node)}$`, "u");
  const cache = new Map<number, boolean>();
  return (cp) => {
    let hit = cache.get(cp);
    if (hit === undefined) {
      if (cache.size >= 4096) cache.clear();
      hit = re.test(String.fromCodePoint(cp));
      cache.set(cp, hit);
    }
    return hit;
  };
}

/**
 * Go's Simplify: counted repetitions become x*, x+ and nested x? (x{2,5} is xx(x(x(x)?)?)?), a
 * repetition of the same repetition collapses (x** is x*), and repeating an empty group is empty.
 */
function simplify(node: Node): Node {
  switch (node.op) {
    case "cat":
    case "alt":
      return { op: node.op, subs: node.subs.map(simplify) };
    case "cap":
      return { op: "cap", index: node.index, sub: simplify(node.sub) };
    case "rep": {
      const { min, max, greedy } = node;
      if (min === 0 && max === 0) return { op: "empty" };
      const sub = simplify(node.sub);
      const basic = (lo: number, hi: number, s: Node): Node => {
        if (s.op === "empty" || (s.op === "rep" && s.min === lo && s.max === hi && s.greedy === greedy))
          return s;
        return { op: "rep", sub: s, min: lo, max: hi, greedy };
      };
      if (max === -1) {
        if (min === 0) return basic(0, -1, sub);
        const plus = basic(1, -1, sub);
        return min === 1 ? plus : { op: "cat", subs: [...new Array<Node>(min - 1).fill(sub), plus] };
      }
      if (min === 1 && max === 1) return sub;
      const parts = new Array<Node>(min).fill(sub);
      if (max > min) {
        let suffix = basic(0, 1, sub);
        for (let i = min + 1; i < max; i++) suffix = basic(0, 1, { op: "cat", subs: [sub, suffix] });
        parts.push(suffix);
      }
      return parts.length === 1 ? (parts[0] as Node) : { op: "cat", subs: parts };
    }
    default:
      return node;
  }
}

/** Whether the node can match the empty string. */
function nullable(node: Node): boolean {
  switch (node.op) {
    case "lit":
    case "class":
    case "any":
      return false;
    case "cat":
      return node.subs.every(nullable);
    case "alt":
      return node.subs.some(nullable);
    case "cap":
      return nullable(node.sub);
    case "rep":
      return node.min === 0 || nullable(node.sub);
    default:
      return true;
  }
}

/**
 * Compiles the tree into a program the way Go's regexp/syntax does, so priorities agree with Go's.
 * @param names capture names by group index, as the parser found them.
 * @param pattern the Go pattern, for messages.
 * @throws RegexError when the program would exceed MAX_PROGRAM instructions.
 */
export function compileProgram(root: Node, names: (string | undefined)[], pattern: string): Program {
  const insts: Inst[] = [];
  const tests = new Map<Node, (cp: number) => boolean>();
  const add = (inst: Inst): number => {
    if (insts.length >= MAX_PROGRAM) {
      throw new RegexError(
        `Cannot compile regexp \`${pattern}\`: expression too large: more than ${MAX_PROGRAM} instructions`,
      );
    }
    insts.push(inst);
    return insts.length - 1;
  };
  const quest = (entry: number, greedy: boolean, next: number): number =>
    add(greedy ? { op: "split", out: entry, alt: next } : { op: "split", out: next, alt: entry });
  // A loop back to `sub`: returns the split deciding whether to go round again, and the body.
  const loop = (sub: Node, greedy: boolean, next: number): [split: number, body: number] => {
    const split = add({ op: "split", out: -1, alt: -1 });
    const body = compile(sub, split);
    insts[split] = greedy ? { op: "split", out: body, alt: next } : { op: "split", out: next, alt: body };
    return [split, body];
  };
  // Compiles `node` so that it continues at `next`; returns its entry point.
  const compile = (node: Node, next: number): number => {
    switch (node.op) {
      case "lit":
      case "class":
      case "any": {
        let test = tests.get(node);
        if (test === undefined) {
          test = charTest(node);
          tests.set(node, test);
        }
        return add({ op: "char", test, out: next });
      }
      case "assert":
        return add({ op: "assert", kind: node.kind, out: next });
      case "empty":
        return next;
      case "cat":
        return node.subs.reduceRight((out, sub) => compile(sub, out), next);
      case "alt": {
        const entries = node.subs.map((sub) => compile(sub, next));
        return entries.reduceRight((alt, entry) => add({ op: "split", out: entry, alt }));
      }
      case "cap": {
        const close = add({ op: "save", slot: node.index * 2 + 1, out: next });
        return add({ op: "save", slot: node.index * 2, out: compile(node.sub, close) });
      }
      case "rep": {
        // Simplified: only x?, x+ and x* remain.
        const { sub, max, greedy } = node;
        if (max === 1) return quest(compile(sub, next), greedy, next);
        const [split, body] = loop(sub, greedy, next);
        if (node.min === 1) return body;
        // x* of an x that can match empty is (x+)?, so the empty iteration keeps its priority
        // (golang.org/issue/46123).
        return nullable(sub) ? quest(body, greedy, next) : split;
      }
    }
  };
  const matchPc = add({ op: "match" });
  const body = compile(simplify(root), add({ op: "save", slot: 1, out: matchPc }));
  const start = add({ op: "save", slot: 0, out: body });
  return { pattern, insts, start, names };
}

function isWordChar(cp: number): boolean {
  return cp === 0x5f || isAlnum(cp);
}

function codePointBefore(s: string, i: number): number {
  if (i <= 0) return -1;
  const low = s.charCodeAt(i - 1);
  if (low >= 0xdc00 && low <= 0xdfff && i >= 2) {
    const high = s.charCodeAt(i - 2);
    if (high >= 0xd800 && high <= 0xdbff) return (high - 0xd800) * 0x400 + (low - 0xdc00) + 0x10000;
  }
  return low;
}

function assertHolds(kind: AssertKind, s: string, pos: number): boolean {
  switch (kind) {
    case "bot":
      return pos === 0;
    case "eot":
      return pos === s.length;
    case "bol":
      return pos === 0 || s.charCodeAt(pos - 1) === 0x0a;
    case "eol":
      return pos === s.length || s.charCodeAt(pos) === 0x0a;
    case "wb":
    case "nwb": {
      const boundary = isWordChar(codePointBefore(s, pos)) !== isWordChar(s.codePointAt(pos) ?? -1);
      return boundary === (kind === "wb");
    }
  }
}

interface Thread {
  pc: number;
  caps: number[];
}

/**
 * Runs the program from `start` (only there when `anchored`); returns capture offsets (UTF-16
 * indices, -1 when a group did not participate) of the leftmost-first match, as Go's regexp does.
 * Callers bound the work first with checkWork.
 * @returns undefined when nothing matches.
 */
export function runProgram(prog: Program, s: string, start: number, anchored: boolean): number[] | undefined {
  const { insts } = prog;
  const slots = prog.names.length * 2;
  const marks = new Int32Array(insts.length).fill(-1);
  let generation = 0;
  let current: Thread[] = [];
  let matched: number[] | undefined;

  // Follows empty transitions from `pc` at `pos`, adding threads in priority order.
  const addThread = (list: Thread[], pc0: number, pos: number, caps0: number[]) => {
    const stack: Thread[] = [{ pc: pc0, caps: caps0 }];
    while (stack.length > 0) {
      const { pc, caps } = stack.pop() as Thread;
      if (marks[pc] === generation) continue;
      marks[pc] = generation;
      const inst = insts[pc] as Inst;
      switch (inst.op) {
        case "split":
          stack.push({ pc: inst.alt, caps }, { pc: inst.out, caps });
          break;
        case "save": {
          const next = caps.slice();
          next[inst.slot] = pos;
          stack.push({ pc: inst.out, caps: next });
          break;
        }
        case "assert":
          if (assertHolds(inst.kind, s, pos)) stack.push({ pc: inst.out, caps });
          break;
        default:
          list.push({ pc, caps });
      }
    }
  };

  for (let pos = start; ; ) {
    if (matched === undefined && (!anchored || pos === start)) {
      addThread(current, prog.start, pos, new Array<number>(slots).fill(-1));
    }
    if (current.length === 0 && (matched !== undefined || anchored)) break;
    const cp = s.codePointAt(pos) ?? -1;
    const width = cp > 0xffff ? 2 : 1;
    const next: Thread[] = [];
    generation++;
    for (const thread of current) {
      const inst = insts[thread.pc] as Inst;
      if (inst.op === "match") {
        matched = thread.caps;
        break; // Leftmost-first: lower-priority threads are cut.
      }
      if (inst.op === "char" && cp >= 0 && inst.test(cp)) addThread(next, inst.out, pos + width, thread.caps);
    }
    if (cp < 0) break;
    current = next;
    pos += width;
  }
  return matched;
}

/**
 * Checks the matching-work bound for `s`.
 * @throws RegexError when `s` is too long for this program (see MAX_REGEX_WORK).
 */
export function checkWork(prog: Program, s: string): void {
  if (s.length * prog.insts.length > MAX_REGEX_WORK) {
    const limit = Math.floor(MAX_REGEX_WORK / prog.insts.length);
    throw new RegexError(
      `Cannot match regexp \`${prog.pattern}\`: input of ${s.length} characters is over this pattern's limit of ${limit}`,
    );
  }
}

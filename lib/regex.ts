// Go regular expressions (RE2 syntax, as Go's `regexp.Compile` accepts it) on JavaScript. Owns the
// parser for Go's syntax (with Go's error wording, so users recognise their config errors), the
// translation to an equivalent `u`-flag JavaScript source, a linear-time matcher that gives the
// returned RegExp Go's semantics and RE2's guarantee (JavaScript's own engine backtracks and can take
// exponential time: `/(a+)+b/` needs seconds on 30 characters), Go's `$` expansion and
// ReplaceAllString.

/** A pattern Go would reject, one JavaScript cannot run the same way, or an input too large to match. */
export class RegexError extends Error {
  override readonly name = "RegexError";
}

/**
 * Upper bound on matching work, in input characters times program instructions. A pattern of 100
 * instructions matches inputs of up to 200,000 characters; node metadata is far shorter.
 */
export const MAX_REGEX_WORK = 20_000_000;

/** Largest compiled program accepted (Go's own limit is about 3.3 million instructions). */
const MAX_PROGRAM = 50_000;
/** Go's `maxHeight`: parse trees nested deeper are refused. */
const MAX_HEIGHT = 1000;
/** Go's counted-repetition limit. */
const MAX_REPEAT = 1000;
/** Largest string replaceAll builds. */
const MAX_REPLACE_OUTPUT = 1 << 20;
const MAX_RUNE = 0x10ffff;

type AssertKind = "bot" | "eot" | "bol" | "eol" | "wb" | "nwb";

interface RangeItem {
  lo: number;
  hi: number;
}

/** A class member: an inclusive code point range or a JavaScript Unicode property. */
type ClassItem = RangeItem | { prop: string; negated: boolean };

type Node =
  | { op: "lit"; cp: number; fold: boolean }
  | { op: "class"; items: ClassItem[]; negated: boolean; fold: boolean }
  | { op: "any"; nl: boolean }
  | { op: "assert"; kind: AssertKind }
  | { op: "empty" }
  | { op: "cat"; subs: Node[] }
  | { op: "alt"; subs: Node[] }
  | { op: "rep"; sub: Node; min: number; max: number; greedy: boolean }
  | { op: "cap"; sub: Node; index: number };

interface Flags {
  fold: boolean;
  dotNL: boolean;
  multiLine: boolean;
  ungreedy: boolean;
}

type Range = readonly [number, number];

const DIGIT: Range[] = [[0x30, 0x39]];
const WORD: Range[] = [
  [0x30, 0x39],
  [0x41, 0x5a],
  [0x5f, 0x5f],
  [0x61, 0x7a],
];
const PERL_SPACE: Range[] = [
  [0x09, 0x0a],
  [0x0c, 0x0d],
  [0x20, 0x20],
];
const PERL_GROUPS: Record<string, Range[]> = { d: DIGIT, s: PERL_SPACE, w: WORD };

const POSIX_GROUPS: Record<string, Range[]> = {
  alnum: [
    [0x30, 0x39],
    [0x41, 0x5a],
    [0x61, 0x7a],
  ],
  alpha: [
    [0x41, 0x5a],
    [0x61, 0x7a],
  ],
  ascii: [[0x00, 0x7f]],
  blank: [
    [0x09, 0x09],
    [0x20, 0x20],
  ],
  cntrl: [
    [0x00, 0x1f],
    [0x7f, 0x7f],
  ],
  digit: DIGIT,
  graph: [[0x21, 0x7e]],
  lower: [[0x61, 0x7a]],
  print: [[0x20, 0x7e]],
  punct: [
    [0x21, 0x2f],
    [0x3a, 0x40],
    [0x5b, 0x60],
    [0x7b, 0x7e],
  ],
  space: [
    [0x09, 0x0d],
    [0x20, 0x20],
  ],
  upper: [[0x41, 0x5a]],
  word: WORD,
  xdigit: [
    [0x30, 0x39],
    [0x41, 0x46],
    [0x61, 0x66],
  ],
};

// Go's unicode.Categories, keyed by Go's canonical spelling (first letter upper, rest lower).
const CATEGORIES = new Set(
  "C Cc Cf Cn Co Cs L Lc Ll Lm Lo Lt Lu M Mc Me Mn N Nd Nl No P Pc Pd Pe Pf Pi Po Ps S Sc Sk Sm So Z Zl Zp Zs".split(
    " ",
  ),
);

// Go's unicode.CategoryAliases (Go 1.26), canonical spelling → category.
const CATEGORY_ALIASES: Record<string, string> = {
  Casedletter: "LC",
  Closepunctuation: "Pe",
  Combiningmark: "M",
  Connectorpunctuation: "Pc",
  Control: "Cc",
  Currencysymbol: "Sc",
  Dashpunctuation: "Pd",
  Decimalnumber: "Nd",
  Enclosingmark: "Me",
  Finalpunctuation: "Pf",
  Format: "Cf",
  Initialpunctuation: "Pi",
  Letter: "L",
  Letternumber: "Nl",
  Lineseparator: "Zl",
  Lowercaseletter: "Ll",
  Mark: "M",
  Mathsymbol: "Sm",
  Modifierletter: "Lm",
  Modifiersymbol: "Sk",
  Nonspacingmark: "Mn",
  Number: "N",
  Openpunctuation: "Ps",
  Other: "C",
  Otherletter: "Lo",
  Othernumber: "No",
  Otherpunctuation: "Po",
  Othersymbol: "So",
  Paragraphseparator: "Zp",
  Privateuse: "Co",
  Punctuation: "P",
  Separator: "Z",
  Spaceseparator: "Zs",
  Spacingmark: "Mc",
  Surrogate: "Cs",
  Symbol: "S",
  Titlecaseletter: "Lt",
  Unassigned: "Cn",
  Uppercaseletter: "Lu",
  Cntrl: "Cc",
  Digit: "Nd",
  Punct: "P",
};

// Go's unicode.Scripts (Unicode 15.0). Listed so that names Go rejects (such as the alias Grek,
// or scripts added after Unicode 15) are rejected here too.
const SCRIPTS = new Map(
  (
    "Adlam Ahom Anatolian_Hieroglyphs Arabic Armenian Avestan Balinese Bamum Bassa_Vah Batak Bengali " +
    "Bhaiksuki Bopomofo Brahmi Braille Buginese Buhid Canadian_Aboriginal Carian Caucasian_Albanian " +
    "Chakma Cham Cherokee Chorasmian Common Coptic Cuneiform Cypriot Cypro_Minoan Cyrillic Deseret " +
    "Devanagari Dives_Akuru Dogra Duployan Egyptian_Hieroglyphs Elbasan Elymaic Ethiopic Georgian " +
    "Glagolitic Gothic Grantha Greek Gujarati Gunjala_Gondi Gurmukhi Han Hangul Hanifi_Rohingya Hanunoo " +
    "Hatran Hebrew Hiragana Imperial_Aramaic Inherited Inscriptional_Pahlavi Inscriptional_Parthian " +
    "Javanese Kaithi Kannada Katakana Kawi Kayah_Li Kharoshthi Khitan_Small_Script Khmer Khojki " +
    "Khudawadi Lao Latin Lepcha Limbu Linear_A Linear_B Lisu Lycian Lydian Mahajani Makasar Malayalam " +
    "Mandaic Manichaean Marchen Masaram_Gondi Medefaidrin Meetei_Mayek Mende_Kikakui Meroitic_Cursive " +
    "Meroitic_Hieroglyphs Miao Modi Mongolian Mro Multani Myanmar Nabataean Nag_Mundari Nandinagari " +
    "New_Tai_Lue Newa Nko Nushu Nyiakeng_Puachue_Hmong Ogham Ol_Chiki Old_Hungarian Old_Italic " +
    "Old_North_Arabian Old_Permic Old_Persian Old_Sogdian Old_South_Arabian Old_Turkic Old_Uyghur Oriya " +
    "Osage Osmanya Pahawh_Hmong Palmyrene Pau_Cin_Hau Phags_Pa Phoenician Psalter_Pahlavi Rejang Runic " +
    "Samaritan Saurashtra Sharada Shavian Siddham SignWriting Sinhala Sogdian Sora_Sompeng Soyombo " +
    "Sundanese Syloti_Nagri Syriac Tagalog Tagbanwa Tai_Le Tai_Tham Tai_Viet Takri Tamil Tangsa Tangut " +
    "Telugu Thaana Thai Tibetan Tifinagh Tirhuta Toto Ugaritic Vai Vithkuqi Wancho Warang_Citi Yezidi Yi " +
    "Zanabazar_Square"
  )
    .split(" ")
    .map((name) => [canonicalName(name), name]),
);

/**
 * Go's lookup key for a Unicode class name: separators dropped, first letter upper, the rest lower.
 * Go 1.26 forgets to canonicalise its script table, so it rejects `Old_Italic`; matching canonical
 * forms on both sides accepts it, as earlier Go versions did.
 */
function canonicalName(name: string): string {
  const letters = name.replace(/[-_ ]/g, "");
  return letters.slice(0, 1).toUpperCase() + letters.slice(1).toLowerCase();
}

/** Parses Go regexp syntax (the Perl flavour: OneLine, ClassNL, PerlX, UnicodeGroups). */
class Parser {
  readonly #src: string;
  #pos = 0;
  #flags: Flags = { fold: false, dotNL: false, multiLine: false, ungreedy: false };
  #depth = 0;
  /** Capture names by group index; index 0 is the whole match. */
  readonly names: (string | undefined)[] = [undefined];

  constructor(src: string) {
    this.#src = src;
  }

  parse(): Node {
    const node = this.#alternation();
    if (this.#pos < this.#src.length) this.#fail("unexpected )", this.#src);
    return node;
  }

  #fail(code: string, expr: string, hint?: string): never {
    throw new RegexError(
      `Cannot compile regexp \`${this.#src}\`: ${code}: \`${expr}\`${hint === undefined ? "" : ` (${hint})`}`,
    );
  }

  /** The code point at `i`, refusing lone surrogates as Go refuses invalid UTF-8. */
  #cp(i: number): number {
    const cp = this.#src.codePointAt(i) ?? -1;
    if (cp >= 0xd800 && cp <= 0xdfff) this.#fail("invalid UTF-8", this.#src.slice(i));
    return cp;
  }

  #alternation(): Node {
    const subs = [this.#concat()];
    while (this.#src[this.#pos] === "|") {
      this.#pos++;
      subs.push(this.#concat());
    }
    return subs.length === 1 ? (subs[0] as Node) : { op: "alt", subs };
  }

  #concat(): Node {
    const src = this.#src;
    const items: Node[] = [];
    let lastRepeat = -1;
    while (this.#pos < src.length) {
      const c = src[this.#pos];
      if (c === "|" || c === ")") break;
      let repeat = -1;
      switch (c) {
        case "(": {
          const group = this.#group();
          if (group !== undefined) items.push(group);
          break;
        }
        case "[":
          items.push(this.#class());
          break;
        case ".":
          this.#pos++;
          items.push({ op: "any", nl: this.#flags.dotNL });
          break;
        case "^":
          this.#pos++;
          items.push({ op: "assert", kind: this.#flags.multiLine ? "bol" : "bot" });
          break;
        case "$":
          this.#pos++;
          items.push({ op: "assert", kind: this.#flags.multiLine ? "eol" : "eot" });
          break;
        case "*":
        case "+":
        case "?":
        case "{":
          repeat = this.#repeat(items, lastRepeat);
          break;
        case "\\":
          this.#escape(items);
          break;
        default: {
          const cp = this.#cp(this.#pos);
          this.#pos += cp > 0xffff ? 2 : 1;
          items.push({ op: "lit", cp, fold: this.#flags.fold });
        }
      }
      lastRepeat = repeat;
    }
    if (items.length === 0) return { op: "empty" };
    return items.length === 1 ? (items[0] as Node) : { op: "cat", subs: items };
  }

  /** Applies a repetition operator to the last item; returns where the operator starts. */
  #repeat(items: Node[], lastRepeat: number): number {
    const src = this.#src;
    const start = this.#pos;
    let min: number;
    let max: number;
    const c = src[start];
    if (c === "{") {
      const counts = parseCounts(src, start);
      if (counts === undefined) {
        this.#pos++;
        items.push({ op: "lit", cp: 0x7b, fold: this.#flags.fold });
        return -1;
      }
      [min, max] = counts;
      this.#pos = counts[2];
      if (min < 0 || min > MAX_REPEAT || max > MAX_REPEAT || (max >= 0 && min > max)) {
        this.#fail("invalid repeat count", src.slice(start, this.#pos));
      }
    } else {
      this.#pos++;
      [min, max] = c === "*" ? [0, -1] : c === "+" ? [1, -1] : [0, 1];
    }
    let greedy = !this.#flags.ungreedy;
    if (src[this.#pos] === "?") {
      this.#pos++;
      greedy = !greedy;
    }
    if (lastRepeat >= 0) this.#fail("invalid nested repetition operator", src.slice(lastRepeat, this.#pos));
    const sub = items.pop();
    if (sub === undefined) this.#fail("missing argument to repetition operator", src.slice(start, this.#pos));
    const node: Node = { op: "rep", sub, min, max, greedy };
    if (c === "{" && (min >= 2 || max >= 2) && !repeatIsValid(node, MAX_REPEAT)) {
      this.#fail("invalid repeat count", src.slice(start, this.#pos));
    }
    items.push(node);
    return start;
  }

  /** Parses a group or a flag change; flag changes yield no node. */
  #group(): Node | undefined {
    const src = this.#src;
    const start = this.#pos;
    let name: string | undefined;
    let capture = true;
    const saved = this.#flags;
    if (src.startsWith("(?", start)) {
      const named = src.startsWith("(?P<", start) ? 4 : src.startsWith("(?<", start) ? 3 : 0;
      if (named > 0 && src.length - start > named) {
        const hint = /^\(\?<[=!]/.test(src.slice(start)) ? "lookbehind is not supported by RE2" : undefined;
        const end = src.indexOf(">", start);
        if (end < 0) this.#fail("invalid named capture", src.slice(start), hint);
        name = src.slice(start + named, end);
        if (!/^[A-Za-z0-9_]+$/.test(name))
          this.#fail("invalid named capture", src.slice(start, end + 1), hint);
        this.#pos = end + 1;
      } else {
        const flags = { ...this.#flags };
        let t = start + 2;
        let negate = false;
        let sawFlag = false;
        for (;;) {
          if (t >= src.length) this.#fail("invalid or unsupported Perl syntax", src.slice(start, t));
          const ch = src[t];
          t += (src.codePointAt(t) ?? 0) > 0xffff ? 2 : 1;
          if (ch === "i" || ch === "m" || ch === "s" || ch === "U") {
            const key = ch === "i" ? "fold" : ch === "m" ? "multiLine" : ch === "s" ? "dotNL" : "ungreedy";
            flags[key] = !negate;
            sawFlag = true;
          } else if (ch === "-" && !negate) {
            negate = true;
            sawFlag = false;
          } else if ((ch === ":" || ch === ")") && (!negate || sawFlag)) {
            this.#pos = t;
            this.#flags = flags;
            if (ch === ")") return undefined;
            capture = false;
            break;
          } else {
            const hint =
              ch === "=" || ch === "!"
                ? "lookahead is not supported by RE2"
                : ch === "<"
                  ? "lookbehind is not supported by RE2"
                  : undefined;
            this.#fail("invalid or unsupported Perl syntax", src.slice(start, t), hint);
          }
        }
      }
    } else {
      this.#pos++;
    }
    if (++this.#depth > MAX_HEIGHT) this.#fail("expression nests too deeply", src);
    let index = 0;
    if (capture) {
      index = this.names.length;
      this.names.push(name);
    }
    const sub = this.#alternation();
    if (src[this.#pos] !== ")") this.#fail("missing closing )", src);
    this.#pos++;
    this.#depth--;
    this.#flags = saved;
    return capture ? { op: "cap", sub, index } : sub;
  }

  #escape(items: Node[]): void {
    const src = this.#src;
    const start = this.#pos;
    const c = src[start + 1];
    const fold = this.#flags.fold;
    switch (c) {
      case "A":
      case "z":
      case "b":
      case "B":
        this.#pos += 2;
        items.push({ op: "assert", kind: c === "A" ? "bot" : c === "z" ? "eot" : c === "b" ? "wb" : "nwb" });
        return;
      case "C":
        this.#fail(
          "invalid escape sequence",
          "\\C",
          "\\C matches single bytes, which JavaScript strings lack",
        );
        break;
      case "Q": {
        const end = src.indexOf("\\E", start + 2);
        const text = src.slice(start + 2, end < 0 ? src.length : end);
        for (let i = 0; i < text.length; ) {
          const cp = this.#cp(start + 2 + i);
          items.push({ op: "lit", cp, fold });
          i += cp > 0xffff ? 2 : 1;
        }
        this.#pos = end < 0 ? src.length : end + 2;
        return;
      }
      case "p":
      case "P":
        items.push({ op: "class", items: this.#unicodeClass(), negated: false, fold });
        return;
      case "d":
      case "D":
      case "s":
      case "S":
      case "w":
      case "W":
        this.#pos += 2;
        items.push({ op: "class", items: this.#perlItems(c), negated: false, fold });
        return;
    }
    items.push({ op: "lit", cp: this.#escapeChar(), fold });
  }

  /** Parses a single-character escape at the current position and returns its code point. */
  #escapeChar(): number {
    const src = this.#src;
    const start = this.#pos;
    if (start + 1 >= src.length) this.#fail("trailing backslash at end of expression", "");
    const c = this.#cp(start + 1);
    let t = start + 1 + (c > 0xffff ? 2 : 1);
    const isOctal = (i: number) => src[i] !== undefined && src[i] >= "0" && src[i] <= "7";
    const fail = (): never => {
      const hint = c >= 0x31 && c <= 0x39 ? "backreferences are not supported by RE2" : undefined;
      return this.#fail("invalid escape sequence", src.slice(start, t), hint);
    };
    if (c < 0x80 && !isAlnum(c)) {
      this.#pos = t;
      return c;
    }
    if ((c >= 0x31 && c <= 0x37 && isOctal(t)) || c === 0x30) {
      let value = c - 0x30;
      for (let i = 1; i < 3 && isOctal(t); i++, t++) value = value * 8 + (src.charCodeAt(t) - 0x30);
      this.#pos = t;
      return value;
    }
    const simple: Record<string, number> = { a: 7, f: 12, n: 10, r: 13, t: 9, v: 11 };
    const ch = String.fromCodePoint(c);
    if (simple[ch] !== undefined) {
      this.#pos = t;
      return simple[ch];
    }
    if (ch !== "x") fail();
    if (t >= src.length) fail();
    if (src[t] === "{") {
      t++;
      let value = 0;
      let digits = 0;
      for (;;) {
        if (t >= src.length) fail();
        const d = src[t] as string;
        t += (src.codePointAt(t) ?? 0) > 0xffff ? 2 : 1;
        if (d === "}") break;
        const v = hexValue(d);
        if (v < 0) fail();
        value = value * 16 + v;
        if (value > MAX_RUNE) fail();
        digits++;
      }
      if (digits === 0) fail();
      this.#pos = t;
      return value;
    }
    const hi = hexValue(src[t] ?? "");
    t += (src.codePointAt(t) ?? 0) > 0xffff ? 2 : 1;
    const lo = hexValue(src[t] ?? "");
    if (t < src.length) t += (src.codePointAt(t) ?? 0) > 0xffff ? 2 : 1;
    if (hi < 0 || lo < 0) fail();
    this.#pos = t;
    return hi * 16 + lo;
  }

  /** Items of `\d`, `\S` and the like at the current position (already consumed). */
  #perlItems(letter: string): ClassItem[] {
    const ranges = PERL_GROUPS[letter.toLowerCase()] as Range[];
    return groupItems(ranges, letter !== letter.toLowerCase(), this.#flags.fold);
  }

  /** Parses `\pL`, `\p{Greek}`, `\P{^Lu}` at the current position. */
  #unicodeClass(): ClassItem[] {
    const src = this.#src;
    const start = this.#pos;
    let negated = src[start + 1] === "P";
    let name: string;
    let end: number;
    if (src[start + 2] === "{") {
      const close = src.indexOf("}", start);
      if (close < 0) this.#fail("invalid character class range", src.slice(start));
      name = src.slice(start + 3, close);
      end = close + 1;
    } else {
      const cp = start + 2 < src.length ? this.#cp(start + 2) : -1;
      name = cp < 0 ? "" : String.fromCodePoint(cp);
      end = start + 2 + name.length;
    }
    const seq = src.slice(start, end);
    this.#pos = end;
    if (name.startsWith("^")) {
      negated = !negated;
      name = name.slice(1);
    }
    const key = canonicalName(name);
    const fold = this.#flags.fold;
    if (key === "Any") return negated ? [] : [{ lo: 0, hi: MAX_RUNE }];
    if (key === "Ascii") return groupItems([[0, 0x7f]], negated, fold);
    let prop: string | undefined;
    if (key === "Assigned") {
      prop = "gc=Cn";
      negated = !negated;
    } else if (key === "Lc") prop = "gc=LC";
    else if (CATEGORIES.has(key)) prop = `gc=${key}`;
    else if (SCRIPTS.has(key)) prop = `sc=${SCRIPTS.get(key)}`;
    else if (Object.hasOwn(CATEGORY_ALIASES, key)) prop = `gc=${CATEGORY_ALIASES[key]}`;
    if (prop === undefined || name === "") this.#fail("invalid character class range", seq);
    return [{ prop, negated }];
  }

  #class(): Node {
    const src = this.#src;
    const start = this.#pos;
    const fold = this.#flags.fold;
    let t = start + 1;
    const negated = src[t] === "^";
    if (negated) t++;
    const items: ClassItem[] = [];
    let first = true;
    while (first || src[t] !== "]") {
      if (t >= src.length) this.#fail("missing closing ]", src.slice(start));
      first = false;
      if (src.startsWith("[:", t) && src.length - t > 2) {
        const close = src.indexOf(":]", t + 2);
        if (close >= 0) {
          const name = src.slice(t, close + 2);
          const inner = name.slice(2, -2);
          const key = inner.replace(/^\^/, "");
          const group = Object.hasOwn(POSIX_GROUPS, key) ? POSIX_GROUPS[key] : undefined;
          if (group === undefined) this.#fail("invalid character class range", name);
          items.push(...groupItems(group, inner.startsWith("^"), fold));
          t = close + 2;
          continue;
        }
      }
      if (src[t] === "\\" && (src[t + 1] === "p" || src[t + 1] === "P")) {
        this.#pos = t;
        items.push(...this.#unicodeClass());
        t = this.#pos;
        continue;
      }
      if (src[t] === "\\" && "dDsSwW".includes(src[t + 1] ?? "_")) {
        items.push(...this.#perlItems(src[t + 1] as string));
        t += 2;
        continue;
      }
      const rangeStart = t;
      const lo = this.#classChar(t, start);
      t = this.#pos;
      let hi = lo;
      if (src[t] === "-" && t + 1 < src.length && src[t + 1] !== "]") {
        hi = this.#classChar(t + 1, start);
        t = this.#pos;
        if (hi < lo) this.#fail("invalid character class range", src.slice(rangeStart, t));
      }
      items.push({ lo, hi });
    }
    this.#pos = t + 1;
    return { op: "class", items, negated, fold };
  }

  #classChar(t: number, classStart: number): number {
    const src = this.#src;
    if (t >= src.length) this.#fail("missing closing ]", src.slice(classStart));
    this.#pos = t;
    if (src[t] === "\\") return this.#escapeChar();
    const cp = this.#cp(t);
    this.#pos = t + (cp > 0xffff ? 2 : 1);
    return cp;
  }
}

/** Parses `{n}`, `{n,}` or `{n,m}` at `start`: [min, max (-1 = unbounded), end], or undefined if not a repeat. */
function parseCounts(src: string, start: number): [number, number, number] | undefined {
  const m = /^\{(0|[1-9][0-9]*)(?:(,)(0|[1-9][0-9]*)?)?\}/.exec(src.slice(start));
  if (m === null) return undefined;
  const num = (s: string) => (s.length > 8 ? -1 : Number(s));
  const min = num(m[1] as string);
  const max = m[2] === undefined ? min : m[3] === undefined ? -1 : num(m[3]);
  return [max === -1 && m[3] !== undefined ? -1 : min, max, start + m[0].length];
}

/** Go's check that nested counted repetitions do not exceed `n` copies of the innermost thing. */
function repeatIsValid(node: Node, n: number): boolean {
  let budget = n;
  if (node.op === "rep") {
    let m = node.max;
    if (m === 0) return true;
    if (m < 0) m = node.min;
    if (m > budget) return false;
    if (m > 0) budget = Math.floor(budget / m);
  }
  return childrenOf(node).every((sub) => repeatIsValid(sub, budget));
}

function childrenOf(node: Node): Node[] {
  switch (node.op) {
    case "cat":
    case "alt":
      return node.subs;
    case "rep":
    case "cap":
      return [node.sub];
    default:
      return [];
  }
}

function isAlnum(c: number): boolean {
  return (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a);
}

function hexValue(c: string): number {
  return /^[0-9A-Fa-f]$/.test(c) ? Number.parseInt(c, 16) : -1;
}

/**
 * Class items for an ASCII group such as `\w` or `[:^alpha:]`. Go folds a group before negating it,
 * so under (?i) the complement is computed here from the folded set (which adds ſ and the Kelvin
 * sign); positive groups are left for JavaScript's own folding, which agrees with Go's.
 */
function groupItems(ranges: readonly Range[], negated: boolean, fold: boolean): ClassItem[] {
  if (!negated) return ranges.map(([lo, hi]) => ({ lo, hi }));
  const base: Range[] = [...ranges];
  if (fold) {
    for (const [lo, hi] of ranges) {
      for (let c = lo; c <= hi; c++) {
        if (c >= 0x41 && c <= 0x5a) base.push([c + 32, c + 32]);
        if (c >= 0x61 && c <= 0x7a) base.push([c - 32, c - 32]);
        if (c === 0x53 || c === 0x73) base.push([0x17f, 0x17f]);
        if (c === 0x4b || c === 0x6b) base.push([0x212a, 0x212a]);
      }
    }
  }
  return complement(normalizeRanges(base)).map(([lo, hi]) => ({ lo, hi }));
}

function normalizeRanges(ranges: readonly Range[]): Range[] {
  const sorted = [...ranges].sort((a, b) => a[0] - b[0]);
  const out: [number, number][] = [];
  for (const [lo, hi] of sorted) {
    const last = out[out.length - 1];
    if (last !== undefined && lo <= last[1] + 1) last[1] = Math.max(last[1], hi);
    else out.push([lo, hi]);
  }
  return out;
}

function complement(ranges: readonly Range[]): Range[] {
  const out: Range[] = [];
  let next = 0;
  for (const [lo, hi] of ranges) {
    if (lo > next) out.push([next, lo - 1]);
    next = hi + 1;
  }
  if (next <= MAX_RUNE) out.push([next, MAX_RUNE]);
  return out;
}

/** Go's tree height and compiled-size limits (`expression nests too deeply`, `expression too large`). */
function checkLimits(node: Node, pattern: string): void {
  const fail = (code: string) => {
    throw new RegexError(`Cannot compile regexp \`${pattern}\`: ${code}: \`${pattern}\``);
  };
  const height = (n: Node): number => 1 + childrenOf(n).reduce((most, sub) => Math.max(most, height(sub)), 0);
  if (height(node) > MAX_HEIGHT) fail("expression nests too deeply");
  const size = (n: Node): number => {
    switch (n.op) {
      case "cat":
        return Math.max(
          1,
          n.subs.reduce((sum, s) => sum + size(s), 0),
        );
      case "alt":
        return n.subs.reduce((sum, s) => sum + size(s), 0) + n.subs.length - 1;
      case "cap":
        return 2 + size(n.sub);
      case "rep": {
        const sub = size(n.sub);
        if (n.max === -1) return n.min === 0 ? 2 + sub : 1 + n.min * sub;
        return Math.max(1, n.max * sub + (n.max - n.min));
      }
      default:
        return 1;
    }
  };
  if (size(node) > (128 << 20) / 40) fail("expression too large");
}

// ---------------------------------------------------------------------------------------------
// Translation to JavaScript source.

const SYNTAX_CHARS = "\\^$.*+?()[]{}|/";
const CLASS_SPECIALS = "\\]^-[";

function emitChar(cp: number, inClass: boolean): string {
  if (cp >= 0x20 && cp < 0x7f) {
    const ch = String.fromCharCode(cp);
    return (inClass ? CLASS_SPECIALS : SYNTAX_CHARS).includes(ch) ? `\\${ch}` : ch;
  }
  return `\\u{${cp.toString(16)}}`;
}

function emitItem(item: ClassItem): string {
  if ("prop" in item) return `${item.negated ? "\\P" : "\\p"}{${item.prop}}`;
  if (item.lo === item.hi) return emitChar(item.lo, true);
  return `${emitChar(item.lo, true)}-${emitChar(item.hi, true)}`;
}

/** The JavaScript for one character-consuming node (a literal, class or dot). */
function emitAtom(node: Node & { op: "lit" | "class" | "any" }): string {
  if (node.op === "any") return node.nl ? "[^]" : "[^\\n]";
  if (node.op === "lit") return node.fold ? `(?i:${emitChar(node.cp, false)})` : emitChar(node.cp, false);
  // Go folds \P{Lu} to "not Lu nor anything folding to Lu"; JavaScript's (?i:\P{Lu}) folds the
  // complement instead (and so matches "A"), hence a lookahead for those items.
  const folded = (item: ClassItem) => node.fold && "prop" in item && item.negated;
  const plain = node.items.filter((item) => !folded(item));
  const lookaheads = node.items
    .filter(folded)
    .map((item) => `(?!(?i:\\p{${(item as { prop: string }).prop}}))[^]`);
  const set = `[${node.negated && lookaheads.length === 0 ? "^" : ""}${plain.map(emitItem).join("")}]`;
  const union = [
    ...(plain.length > 0 || lookaheads.length === 0 ? [node.fold ? `(?i:${set})` : set] : []),
    ...lookaheads,
  ];
  if (lookaheads.length === 0) return union[0] as string;
  return node.negated ? `(?:(?!${union.join("|")})[^])` : `(?:${union.join("|")})`;
}

const ASSERTIONS: Record<AssertKind, string> = {
  bot: "^",
  eot: "$",
  bol: "(?<![^\\n])",
  eol: "(?![^\\n])",
  wb: "\\b",
  nwb: "\\B",
};

/**
 * Emits JavaScript source equivalent to the tree. Flags are compiled into the tree, so the only
 * JavaScript flag is `u`: case folding becomes `(?i:…)` around literals and classes, `^`/`$` under
 * (?m) become lookarounds for `\n` only (JavaScript's multiline mode also breaks at `\r`, U+2028 and
 * U+2029), and `.` becomes `[^\n]`. Group names JavaScript cannot take (a leading digit, a repeat)
 * are renamed; the matcher reports Go's names.
 */
function emit(node: Node, jsNames: (string | undefined)[]): string {
  switch (node.op) {
    case "lit":
    case "class":
    case "any":
      return emitAtom(node);
    case "assert":
      return ASSERTIONS[node.kind];
    case "empty":
      return "";
    case "cat": {
      let out = "";
      let foldRun = "";
      for (const sub of node.subs) {
        if (sub.op === "lit" && sub.fold) {
          foldRun += emitChar(sub.cp, false);
          continue;
        }
        if (foldRun !== "") out += `(?i:${foldRun})`;
        foldRun = "";
        out += sub.op === "alt" ? `(?:${emit(sub, jsNames)})` : emit(sub, jsNames);
      }
      return foldRun === "" ? out : `${out}(?i:${foldRun})`;
    }
    case "alt":
      return node.subs.map((sub) => emit(sub, jsNames)).join("|");
    case "cap": {
      const name = jsNames[node.index];
      return `(${name === undefined ? "" : `?<${name}>`}${emit(node.sub, jsNames)})`;
    }
    case "rep": {
      const atomic = ["lit", "class", "any", "cap"].includes(node.sub.op);
      const inner = emit(node.sub, jsNames);
      const operand = atomic ? inner : `(?:${inner})`;
      const { min, max } = node;
      const quantifier =
        max === -1
          ? min === 0
            ? "*"
            : min === 1
              ? "+"
              : `{${min},}`
          : min === 0 && max === 1
            ? "?"
            : min === max
              ? `{${min}}`
              : `{${min},${max}}`;
      return `${operand}${quantifier}${node.greedy ? "" : "?"}`;
    }
  }
}

/** JavaScript names for capture groups: Go allows names JavaScript does not. */
function jsGroupNames(names: readonly (string | undefined)[]): (string | undefined)[] {
  const seen = new Map<string, number>();
  return names.map((name) => {
    if (name === undefined) return undefined;
    const count = (seen.get(name) ?? 0) + 1;
    seen.set(name, count);
    const base = /^[0-9]/.test(name) ? `$${name}` : name;
    return count === 1 ? base : `${base}$${count}`;
  });
}

// ---------------------------------------------------------------------------------------------
// Linear-time matching (a Pike VM, as in Go's regexp package): every thread advances in lock step
// over the input, so matching costs input length × program size whatever the pattern.

type Inst =
  | { op: "char"; test: (cp: number) => boolean; out: number }
  | { op: "split"; out: number; alt: number }
  | { op: "save"; slot: number; out: number }
  | { op: "assert"; kind: AssertKind; out: number }
  | { op: "match" };

interface Program {
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

/** Compiles the tree into a program the way Go's regexp/syntax does, so priorities agree with Go's. */
function compileProgram(root: Node, names: (string | undefined)[], pattern: string): Program {
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
 */
function runProgram(prog: Program, s: string, start: number, anchored: boolean): number[] | undefined {
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

/** Checks the matching-work bound for `s`. */
function checkWork(prog: Program, s: string): void {
  if (s.length * prog.insts.length > MAX_REGEX_WORK) {
    const limit = Math.floor(MAX_REGEX_WORK / prog.insts.length);
    throw new RegexError(
      `Cannot match regexp \`${prog.pattern}\`: input of ${s.length} characters is over this pattern's limit of ${limit}`,
    );
  }
}

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
  const parser = new Parser(pattern);
  const root = parser.parse();
  checkLimits(root, pattern);
  const source = emit(root, jsGroupNames(parser.names));
  let prog: Program;
  try {
    prog = compileProgram(root, parser.names, pattern);
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

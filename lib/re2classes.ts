// Character classes of Go's RE2 syntax: the ASCII groups (Perl's `\d \s \w` and POSIX's
// `[:alpha:]` …, folded before negation as Go does), the Unicode classes Go knows (its category,
// alias and script tables, with its name canonicalisation) mapped to JavaScript properties, and
// code point range arithmetic.

/** The largest code point. */
export const MAX_RUNE = 0x10ffff;

/** An inclusive code point range. */
export interface RangeItem {
  lo: number;
  hi: number;
}

/** A class member: an inclusive code point range or a JavaScript Unicode property. */
export type ClassItem = RangeItem | { prop: string; negated: boolean };

/** An inclusive code point range as a pair. */
export type Range = readonly [number, number];

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

/** Whether the code point is an ASCII letter or digit. */
export function isAlnum(c: number): boolean {
  return (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a);
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

/** Sorts ranges and merges those that overlap or touch. */
export function normalizeRanges(ranges: readonly Range[]): Range[] {
  const sorted = [...ranges].sort((a, b) => a[0] - b[0]);
  const out: [number, number][] = [];
  for (const [lo, hi] of sorted) {
    const last = out[out.length - 1];
    if (last !== undefined && lo <= last[1] + 1) last[1] = Math.max(last[1], hi);
    else out.push([lo, hi]);
  }
  return out;
}

/** The code points not in `ranges` (which must be normalised). */
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

/**
 * Items of a Perl class: `\d`, `\s`, `\w`, or negated in upper case (`\D`, `\S`, `\W`).
 * @param letter the class letter, one of dDsSwW.
 */
export function perlClassItems(letter: string, fold: boolean): ClassItem[] {
  const ranges = PERL_GROUPS[letter.toLowerCase()] as Range[];
  return groupItems(ranges, letter !== letter.toLowerCase(), fold);
}

/**
 * Items of a POSIX class by the name between `[:` and `:]`, a leading `^` negating it.
 * @returns undefined for a name Go does not know.
 * @example posixClassItems("^digit", false) // [{ lo: 0, hi: 0x2f }, { lo: 0x3a, hi: 0x10ffff }]
 */
export function posixClassItems(inner: string, fold: boolean): ClassItem[] | undefined {
  const key = inner.replace(/^\^/, "");
  const group = Object.hasOwn(POSIX_GROUPS, key) ? POSIX_GROUPS[key] : undefined;
  return group === undefined ? undefined : groupItems(group, inner.startsWith("^"), fold);
}

/**
 * Items of a Unicode class by the name `\p` or `\P` gives (`L`, `Greek`, `Any`; Go's spelling
 * rules), negated for `\P` or a leading `^` already stripped by the caller.
 * @returns undefined for a name Go does not know.
 * @example unicodeClassItems("greek", false, false) // [{ prop: "sc=Greek", negated: false }]
 */
export function unicodeClassItems(name: string, negated: boolean, fold: boolean): ClassItem[] | undefined {
  const key = canonicalName(name);
  if (key === "Any") return negated ? [] : [{ lo: 0, hi: MAX_RUNE }];
  if (key === "Ascii") return groupItems([[0, 0x7f]], negated, fold);
  let prop: string | undefined;
  let negate = negated;
  if (key === "Assigned") {
    prop = "gc=Cn";
    negate = !negate;
  } else if (key === "Lc") prop = "gc=LC";
  else if (CATEGORIES.has(key)) prop = `gc=${key}`;
  else if (SCRIPTS.has(key)) prop = `sc=${SCRIPTS.get(key)}`;
  else if (Object.hasOwn(CATEGORY_ALIASES, key)) prop = `gc=${CATEGORY_ALIASES[key]}`;
  return prop === undefined ? undefined : [{ prop, negated: negate }];
}

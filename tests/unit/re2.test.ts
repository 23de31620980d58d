// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${1} and ${name} are Go's expansion syntax under test
import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { compileRegex, expandTemplate, MAX_REGEX_WORK, RegexError, replaceAll } from "../../lib/re2.ts";

// Expected values are Go 1.26's regexp results for the same pattern and input.

/** A copy with other flags, made the way String.prototype.split and matchAll make theirs. */
function withFlags(re: RegExp, flags: string): RegExp {
  return new (re.constructor as RegExpConstructor)(re, flags);
}

function groups(pattern: string, input: string): (string | undefined)[] | null {
  const m = compileRegex(pattern).exec(input);
  return m === null ? null : [...m];
}

describe("compileRegex() matches as Go's regexp does", () => {
  test.each<[string, string, (string | undefined)[] | null]>([
    // Anchors and dot: `.` stops only at \n, `$` only at the very end, (?m) breaks at \n only.
    ["^web-.+$", "web-1", ["web-1"]],
    ["^web-.+$", "db-1", null],
    ["^web-[\\w]+$", "web-a_1", ["web-a_1"]],
    ["a.c", "a\nc", null],
    ["a.c", "a\rc", ["a\rc"]],
    ["a.c", "a\u2028c", ["a\u2028c"]],
    ["(?s)a.c", "a\nc", ["a\nc"]],
    ["x$", "x\n", null],
    ["(?m)x$", "x\n", ["x"]],
    ["(?m)^b", "a\nb", ["b"]],
    ["(?m)^b", "a\rb", null],
    ["^b", "a\nb", null],
    ["\\Ab", "b", ["b"]],
    ["a\\z", "a\n", null],
    // Flags.
    ["(?i)^WEB-(\\d+)$", "web-42", ["web-42", "42"]],
    ["(?i:a)b", "Ab", ["Ab"]],
    ["(?i:a)b", "AB", null],
    ["(?i)a(?-i)b", "AB", null],
    ["(?i)k", "\u212a", ["\u212a"]],
    ["(?i)[^k]", "K", null],
    ["(?i)\\W", "\u017f", null],
    ["(?U)a+", "aaa", ["a"]],
    ["(?U)a+?", "aaa", ["aaa"]],
    ["a*?", "aaa", [""]],
    // Groups: leftmost-first, captures kept across iterations, Go's empty-iteration priority.
    ["(?P<first>\\w+) (?P<last>\\w+)", "Ada Lovelace", ["Ada Lovelace", "Ada", "Lovelace"]],
    ["(?<year>\\d{4})-(?<month>\\d{2})", "on 2024-05-01", ["2024-05", "2024", "05"]],
    ["(?:(a)|b)+", "ab", ["ab", "a"]],
    ["(a*)+", "b", ["", ""]],
    ["(a|ab)(c|bcd)(d*)", "abcd", ["abcd", "a", "bcd", ""]],
    ["(a)|(b)", "b", ["b", undefined, "b"]],
    ["(?P<x>a)?(?P<x>b)", "b", ["b", undefined, "b"]],
    // Classes: Perl classes are ASCII-only, POSIX classes, Unicode classes.
    ["\\s+", "a \t\n\f\rb", [" \t\n\f\r"]],
    ["\\s", "\v", null],
    ["\\s", "\u00a0", null],
    ["\\d+", "x\u06633", ["3"]],
    ["\\w+", "héllo", ["h"]],
    ["[[:alpha:]]+", "ab1", ["ab"]],
    ["[[:^alpha:]]+", "ab12c", ["12"]],
    ["[[:punct:]]+", "a!-/b", ["!-/"]],
    ["\\pL+", "héllo1", ["héllo"]],
    ["\\p{Greek}+", "abγδε", ["γδε"]],
    ["\\PL+", "ab12!c", ["12!"]],
    ["[^\\p{Lu}]+", "ABcdE", ["cd"]],
    ["[\\d-z]+", "x-z5", ["-z5"]],
    ["[]a]+", "a]b", ["a]"]],
    ["[a-]+", "-a-", ["-a-"]],
    ["\\p{Letter}+", "ab1", ["ab"]],
    // Escapes and literals.
    ["\\Qa.b\\E+", "a.bb", ["a.bb"]],
    ["\\x41\\x{42}\\103", "ABC", ["ABC"]],
    ["\\141", "a", ["a"]],
    ["a{,3}", "a{,3}", ["a{,3}"]],
    ["a{2", "a{2", ["a{2"]],
    ["\\.", "a.b", ["."]],
    ["\\x{1F600}+", "x😀😀", ["😀😀"]],
    ["😀.", "😀é", ["😀é"]],
    // Repetition and word boundaries.
    ["a{2,3}", "aaaa", ["aaa"]],
    ["a{2,}?", "aaaa", ["aa"]],
    ["(ab){2}", "ababab", ["abab", "ab"]],
    ["\\bfoo\\b", "a foo b", ["foo"]],
    ["\\Bo", "foo", ["o"]],
  ])("compileRegex(%j) on %j", (pattern, input, want) => {
    expect(groups(pattern, input)).toEqual(want);
  });

  test("compileRegex() gives named groups Go's names, the first participating group winning", () => {
    expect(compileRegex("(?P<x>a)?(?P<x>b)").exec("b")?.groups).toEqual({ x: "b" });
    expect(compileRegex("(?<1st>a)").exec("a")?.groups).toEqual({ "1st": "a" });
    expect(compileRegex("(a)").exec("a")?.groups).toBeUndefined();
  });

  test("compileRegex() reports match positions in UTF-16 units, like any JavaScript match", () => {
    const m = compileRegex("é+").exec("😀éé");
    expect(m?.index).toBe(2);
    expect(m?.input).toBe("😀éé");
  });
});

describe("compileRegex() refuses what Go refuses, in Go's words", () => {
  test.each<[string, string]>([
    ["(", "missing closing ): `(`"],
    [")", "unexpected ): `)`"],
    ["a**", "invalid nested repetition operator: `**`"],
    ["a*?*", "invalid nested repetition operator: `*?*`"],
    ["x{2}{3}", "invalid nested repetition operator: `{2}{3}`"],
    ["a{1001}", "invalid repeat count: `{1001}`"],
    ["(a{100}){100}", "invalid repeat count: `{100}`"],
    ["*", "missing argument to repetition operator: `*`"],
    ["a|*", "missing argument to repetition operator: `*`"],
    ["\\1", "invalid escape sequence: `\\1` (backreferences are not supported by RE2)"],
    ["\\8", "invalid escape sequence: `\\8` (backreferences are not supported by RE2)"],
    ["(?=a)", "invalid or unsupported Perl syntax: `(?=` (lookahead is not supported by RE2)"],
    ["(?!a)", "invalid or unsupported Perl syntax: `(?!` (lookahead is not supported by RE2)"],
    ["(?<=a)b", "invalid named capture: `(?<=a)b` (lookbehind is not supported by RE2)"],
    ["(?<!a)b", "invalid named capture: `(?<!a)b` (lookbehind is not supported by RE2)"],
    ["(?P=a)", "invalid or unsupported Perl syntax: `(?P`"],
    ["(?#c)", "invalid or unsupported Perl syntax: `(?#`"],
    ["(?i-)", "invalid or unsupported Perl syntax: `(?i-)`"],
    ["(?i", "invalid or unsupported Perl syntax: `(?i`"],
    ["\\C", "invalid escape sequence: `\\C` (\\C matches single bytes, which JavaScript strings lack)"],
    ["\\pX", "invalid character class range: `\\pX`"],
    ["\\p{Grek}", "invalid character class range: `\\p{Grek}`"],
    ["\\p", "invalid character class range: `\\p`"],
    ["[[:foo:]]", "invalid character class range: `[:foo:]`"],
    ["[a", "missing closing ]: `[a`"],
    ["[]", "missing closing ]: `[]`"],
    ["[z-a]", "invalid character class range: `z-a`"],
    ["\\x{110000}", "invalid escape sequence: `\\x{110000`"],
    ["\\xZ", "invalid escape sequence: `\\xZ`"],
    ["\\", "trailing backslash at end of expression: ``"],
    ["[a-\\d]", "invalid escape sequence: `\\d`"],
    ["\\é", "invalid escape sequence: `\\é`"],
    ["(?P<a-b>x)", "invalid named capture: `(?P<a-b>`"],
  ])("compileRegex(%j)", (pattern, detail) => {
    expect(() => compileRegex(pattern)).toThrow(
      new RegexError(`Cannot compile regexp \`${pattern}\`: ${detail}`),
    );
  });

  test("compileRegex() refuses nesting deeper than Go's 1000 levels", () => {
    const deep = `${"(".repeat(1001)}a${")".repeat(1001)}`;
    expect(() => compileRegex(deep)).toThrow("expression nests too deeply");
    expect(compileRegex(`${"(".repeat(500)}a${")".repeat(500)}`).test("a")).toBe(true);
  });

  test("compileRegex() refuses a lone surrogate, as Go refuses invalid UTF-8", () => {
    expect(() => compileRegex("a\ud800")).toThrow("invalid UTF-8");
  });
});

describe("compileRegex() returns a standard RegExp", () => {
  test("compileRegex() result is a u-flag RegExp whose source JavaScript accepts", () => {
    const re = compileRegex("(?i)^web-(?P<id>\\d+)$");
    expect(re).toBeInstanceOf(RegExp);
    expect(re.flags).toBe("u");
    expect(() => new RegExp(re.source, "u")).not.toThrow();
  });

  test.each<[string, string]>([
    [".", "[^\\n]"],
    ["(?s).", "[^]"],
    ["(?i)ab", "(?i:ab)"],
    ["(?m)^a$", "(?<![^\\n])a(?![^\\n])"],
    ["^a$", "^a$"],
    ["\\s", "[\\u{9}-\\u{a}\\u{c}-\\u{d} ]"],
    ["(?P<name>x)", "(?<name>x)"],
    ["(?<1a>x)(?P<1a>y)", "(?<$1a>x)(?<$1a$2>y)"],
    ["(?U)a+b*?", "a+?b*"],
    ["a{2,5}", "a{2,5}"],
    ["[^a-c]", "[^a-c]"],
    ["\\p{Greek}", "[\\p{sc=Greek}]"],
    ["\\.{", "\\.\\{"],
  ])("compileRegex(%j).source is %j", (pattern, source) => {
    expect(compileRegex(pattern).source).toBe(source);
  });

  test("compileRegex() results work with test, search, match, replace, split and matchAll", () => {
    const re = compileRegex("(?:(a)|b)+");
    expect(re.test("xab")).toBe(true);
    expect("xab".search(re)).toBe(1);
    // JavaScript's own engine would drop the capture of the first iteration here.
    expect("xab".match(re)?.[1]).toBe("a");
    expect("xabyb".replace(re, "<$1>")).toBe("x<a>yb");
    expect("xabyb".replace(withFlags(re, "gu"), "<$1>")).toBe("x<a>y<>");
    expect("xabyb".replace(new RegExp(re, "gu"), "<$1>")).toBe("x<>y<>"); // a plain copy: JavaScript's engine
    expect("1-2--3".split(compileRegex("-+"))).toEqual(["1", "2", "3"]);
    const all = [..."a1b22".matchAll(withFlags(compileRegex("\\d+"), "gu"))].map((m) => m[0]);
    expect(all).toEqual(["1", "22"]);
  });

  test("compileRegex() results honour lastIndex with the g and y flags", () => {
    const global = withFlags(compileRegex("\\d"), "gu");
    expect(global.exec("a1b2")?.index).toBe(1);
    expect(global.lastIndex).toBe(2);
    expect(global.exec("a1b2")?.index).toBe(3);
    expect(global.exec("a1b2")).toBeNull();
    expect(global.lastIndex).toBe(0);
    const sticky = withFlags(compileRegex("\\d"), "uy");
    expect(sticky.exec("a1")).toBeNull();
    sticky.lastIndex = 1;
    expect(sticky.exec("a1")?.[0]).toBe("1");
  });

  test("compileRegex() results cannot be copied with flags that would change Go's semantics", () => {
    expect(() => withFlags(compileRegex("a"), "i")).toThrow(RegexError);
    expect(() => withFlags(compileRegex("a"), "m")).toThrow(RegexError);
  });

  test("compileRegex() matches in linear time where a backtracking engine takes exponential time", () => {
    expect(compileRegex("(a+)+b").test("a".repeat(5000))).toBe(false);
    expect(compileRegex("^(\\d+\\.?){4}$").test(`${"1".repeat(5000)}!`)).toBe(false);
    expect(compileRegex("(.*,)*x").test(",".repeat(5000))).toBe(false);
  });

  test("compileRegex() results refuse inputs beyond MAX_REGEX_WORK", () => {
    const re = compileRegex("a{1000}");
    expect(() => re.test("a".repeat(MAX_REGEX_WORK))).toThrow(RegexError);
    expect(() => re.test("a".repeat(MAX_REGEX_WORK))).toThrow(
      /input of \d+ characters is over this pattern's limit/,
    );
  });

  test("compileRegex() refuses programs beyond its size limit", () => {
    expect(() => compileRegex("a{1000}".repeat(51))).toThrow("expression too large");
    expect(compileRegex("a{1000}".repeat(49)).test("a")).toBe(false);
  });
});

describe("expandTemplate()", () => {
  const m = compileRegex("(?P<first>\\w+) (\\w+)").exec("hello world") as RegExpExecArray;
  test.each<[string, string]>([
    ["$1", "hello"],
    ["${1}", "hello"],
    ["$first", "hello"],
    ["${first}", "hello"],
    ["$2-$1", "world-hello"],
    ["$0", "hello world"],
    ["$$1", "$1"],
    ["$1x", ""],
    ["${1}x", "hellox"],
    ["$01", ""],
    ["$3", ""],
    ["$nope", ""],
    ["$", "$"],
    ["${", "${"],
    ["${1", "${1"],
    ["$!", "$!"],
    ["a$$b", "a$b"],
  ])("expandTemplate(%j)", (template, want) => {
    expect(expandTemplate(template, m)).toBe(want);
  });

  test("expandTemplate() reads groups of a plain JavaScript match too", () => {
    expect(expandTemplate("${1}W", /a(x*)b/u.exec("axxb") as RegExpExecArray)).toBe("xxW");
    expect(expandTemplate("<$n>", /(?<n>\d)/u.exec("a1") as RegExpExecArray)).toBe("<1>");
  });
});

describe("replaceAll()", () => {
  test.each<[string, string, string, string]>([
    ["a*", "baaac", "-", "-b-c-"],
    ["x*", "abc", "-", "-a-b-c-"],
    ["(?P<first>\\w+) (\\w+)", "hello world", "$2 ${first} $1x ${1}x $$ $", "world hello  hellox $ $"],
    ["a(x*)b", "-ab-axxb-", "${1}W", "-W-xxW-"],
    ["a(x*)b", "-ab-axxb-", "$1W", "---"],
    ["\\d", "a1b22", "", "ab"],
    ["^", "abc", ">", ">abc"],
    ["$", "abc", "<", "abc<"],
    ["(?m)$", "a\nb", ";", "a;\nb;"],
    ["", "😀é", "-", "-😀-é-"],
    ["(a)|b", "ab", "[$1]", "[a][]"],
    ["(?P<n>.)", "xy", "${n}${n}", "xxyy"],
    ["b", "abc", "$0$0", "abbc"],
    ["b", "abc", "${", "a${c"],
    ["b", "abc", "$01", "ac"],
  ])("replaceAll(%j, %j, %j)", (pattern, src, repl, want) => {
    expect(replaceAll(compileRegex(pattern), src, repl)).toBe(want);
  });

  test("replaceAll() applies Go's rules to a plain JavaScript RegExp too", () => {
    expect(replaceAll(/a*/u, "baaac", "-")).toBe("-b-c-");
    expect("baaac".replace(/a*/gu, "-")).toBe("-b--c-"); // what JavaScript alone would give
  });

  test("replaceAll() refuses a result over 1 MiB", () => {
    expect(() => replaceAll(compileRegex(""), "a".repeat(2000), "x".repeat(1000))).toThrow(RegexError);
  });
});

describe("compileRegex() properties", () => {
  const pieces = fc.constantFrom(
    ..."a b . * + ? | ( ) [ ] { } ^ $ \\ - , : = ! < > P i m s U 0 1 2 9 d w s D W S b B p L { } x Q E z A C é 😀".split(
      " ",
    ),
    "(?",
    "(?P<",
    "\\p{",
    "[:",
    ":]",
    "{2}",
    "{1,3}",
  );
  const patterns = fc.array(pieces, { maxLength: 20 }).map((p) => p.join(""));
  const inputs = fc
    .array(fc.constantFrom(..."aAbB1 .-\n😀éK\u212a"), { maxLength: 12 })
    .map((s) => s.join(""));

  test("compileRegex() throws nothing but RegexError on random patterns", () => {
    fc.assert(
      fc.property(patterns, (pattern) => {
        try {
          compileRegex(pattern);
        } catch (err) {
          if (!(err instanceof RegexError)) throw err;
        }
      }),
      { numRuns: 3000 },
    );
  });

  test("compileRegex() results match and replace random inputs without throwing", () => {
    fc.assert(
      fc.property(patterns, inputs, (pattern, input) => {
        let re: RegExp;
        try {
          re = compileRegex(pattern);
        } catch {
          return;
        }
        const m = re.exec(input);
        if (m !== null) expect(input.slice(m.index, m.index + (m[0] as string).length)).toBe(m[0] as string);
        expect(typeof replaceAll(re, input, "<$0$1>")).toBe("string");
      }),
      { numRuns: 3000 },
    );
  });

  test("compileRegex() of a \\Q…\\E literal finds it where indexOf does", () => {
    const text = fc
      .array(fc.constantFrom(..."ab.*+?()[]{}|^$\\-é😀"), { maxLength: 8 })
      .map((s) => s.join(""));
    fc.assert(
      fc.property(text, text, (needle, hay) => {
        fc.pre(!needle.includes("\\E"));
        const m = compileRegex(`\\Q${needle}\\E`).exec(hay);
        expect(m?.index ?? -1).toBe(hay.indexOf(needle));
      }),
      { numRuns: 2000 },
    );
  });
});

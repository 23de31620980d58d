// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${1} and ${name} are Go's expansion syntax under test
import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { parseTemplate, type Template, TemplateError } from "../../lib/template.ts";

// Expected outputs are what Go 1.26's text/template produces for the same template, with the
// reference transformer's functions and a struct holding the same fields.

/** Data shaped as lib/transform.ts passes it: the reference's Go field names. */
const data = {
  Platform: "metal",
  Hostname: "web-1.example.com",
  Region: "us-east",
  Zone: "us-east-1a",
  InstanceType: "t2.micro",
  InstanceID: "i-0abc",
  ProviderID: "",
  Spot: true,
  InternalDNS: "",
  ExternalDNS: "",
  Tags: { env: "prod", team: "a&b" },
  Manufacturer: "",
  ProductName: "",
  Version: "",
  SerialNumber: "",
  UUID: "e8e8c388-5812-4db0-87e2-ad1fee51a1c1",
  WakeUpType: "",
  SKUNumber: "",
};

function render(source: string, values: unknown = data): string {
  return parseTemplate(source, "t").execute(values);
}

/** The TemplateError a template raises, parsing or executing. */
function failure(source: string, values: unknown = data): TemplateError {
  try {
    render(source, values);
  } catch (err) {
    if (err instanceof TemplateError) return err;
    throw err;
  }
  throw new Error(`no error from ${JSON.stringify(source)}`);
}

describe("parseTemplate().execute() renders as Go's text/template", () => {
  test.each<[string, string]>([
    // text, trim markers and comments
    ["", ""],
    ["plain text", "plain text"],
    ["a  {{- .Zone -}}  b", "aus-east-1ab"],
    ["{{23 -}} < {{- 45}}", "23<45"],
    ["{{-3}}", "-3"],
    ["a\n\t {{- /* gone */ -}} \n b", "ab"],
    ["{{/* comment\nover lines */}}x", "x"],
    ["{{ .Zone\n}}", "us-east-1a"],
    // fields and maps
    ["{{.Hostname}}", "web-1.example.com"],
    ["{{ .Platform }}/{{ .Zone }}", "metal/us-east-1a"],
    ["{{.Spot}}", "true"],
    ["{{.Tags.env}}", "prod"],
    ["{{.Tags.missing}}", "<no value>"],
    ['{{index .Tags "missing"}}', ""],
    ["{{.Tags}}", "map[env:prod team:a&b]"],
    ["{{.InternalDNS}}", ""],
    ["{{$.Zone}}", "us-east-1a"],
    ["{{(.Tags).env}}", "prod"],
    ["{{with .Tags}}{{.team}}{{end}}", "a&b"],
    // variables
    ["{{$x := .Zone}}{{$x}}", "us-east-1a"],
    ["{{$x := 2}}{{$x = 3}}{{$x}}", "3"],
    ["{{$x := 1}}{{if true}}{{$x := 2}}{{if true}}{{$x = 3}}{{end}}{{end}}{{$x}}", "1"],
    ["{{$x := 2}}{{if true}}{{$x = 3}}{{end}}{{$x}}", "3"],
    ["{{if $z := .Zone}}[{{$z}}]{{end}}", "[us-east-1a]"],
    ['{{with $x := "output" | printf "%q"}}{{$x}}{{end}}', '"output"'],
    // if, with, else
    ["{{if .Spot}}spot{{else}}on-demand{{end}}", "spot"],
    ["{{if .InternalDNS}}a{{else if .Zone}}b{{else}}c{{end}}", "b"],
    ["{{if 0}}x{{else}}zero{{end}}", "zero"],
    ["{{if 0.0}}x{{else}}zero{{end}}", "zero"],
    ['{{if ""}}x{{else}}empty{{end}}', "empty"],
    ["{{if .Tags}}tags{{end}}", "tags"],
    ["{{if .Tags.missing}}x{{else}}no value{{end}}", "no value"],
    ["{{with .Zone}}[{{.}}]{{else}}none{{end}}", "[us-east-1a]"],
    ["{{with .InternalDNS}}[{{.}}]{{else}}none{{end}}", "none"],
    ["{{with .InternalDNS}}a{{else with .Zone}}b={{.}}{{end}}", "b=us-east-1a"],
    // range
    ["{{range $k, $v := .Tags}}{{$k}}={{$v}};{{end}}", "env=prod;team=a&b;"],
    ["{{range .Tags}}{{.}},{{end}}", "prod,a&b,"],
    ["{{range $v := .Tags}}{{$v}} {{end}}", "prod a&b "],
    ["{{range 3}}{{.}}{{end}}", "012"],
    ["{{range $i := 3}}<{{$i}}>{{end}}", "<0><1><2>"],
    ["{{range 0}}x{{else}}empty{{end}}", "empty"],
    ["{{range .Tags.missing}}x{{else}}nil ranges as empty{{end}}", "nil ranges as empty"],
    ['{{range $k, $v := .Tags}}{{if eq $k "team"}}{{break}}{{end}}{{$k}}{{end}}', "env"],
    ['{{range $k, $v := .Tags}}{{if eq $k "env"}}{{continue}}{{end}}{{$k}}{{end}}', "team"],
    ["{{range 2}}{{range 3}}{{if eq . 1}}{{break}}{{end}}{{.}}{{end}}|{{end}}", "0|0|"],
    // pipelines and parentheses
    ["{{.Hostname | upper}}", "WEB-1.EXAMPLE.COM"],
    ['{{"output" | printf "%q"}}', '"output"'],
    ['{{printf "%q" (print "out" "put")}}', '"output"'],
    ['{{"put" | printf "%s%s" "out" | printf "%q"}}', '"output"'],
    ["{{(1)}}", "1"],
    ['{{ .Zone | printf "%s!" | upper }}', "US-EAST-1A!"],
    // constants
    ["{{3}} {{3.0}} {{1e3}} {{1.5}} {{-0}} {{.5}}", "3 3 1000 1.5 0 0.5"],
    ["{{0x1F}} {{0o17}} {{017}} {{0b101}} {{1_000}} {{0x1p-2}}", "31 15 15 5 1000 0.25"],
    ["{{'a'}} {{'\\n'}} {{'\\x41'}}", "97 10 65"],
    ['{{"a\\tb\\u00e9\\x41\\101"}}', "a\tbéAA"],
    ["{{`raw\\t`}}", "raw\\t"],
    ["{{true}} {{false}}", "true false"],
    [
      "{{1e6}} {{1e20}} {{1e21}} {{123456789.0}} {{0.000012345}}",
      "1e+06 1e+20 1e+21 1.23456789e+08 1.2345e-05",
    ],
    // and, or, not
    ["{{and 1 0}}", "0"],
    ["{{and 1 2}}", "2"],
    ['{{or 0 ""}}', ""],
    ["{{or 0 3}}", "3"],
    ["{{or .InternalDNS .Zone}}", "us-east-1a"],
    ["{{and .InternalDNS .Nope}}", ""],
    ["{{or .Zone .Nope}}", "us-east-1a"],
    ["{{not 0}}", "true"],
    ["{{not .Tags}}", "false"],
    ["{{1 | and 0}}", "0"],
    // comparisons
    ["{{eq 1 1}}", "true"],
    ["{{eq 1 2 3 1}}", "true"],
    ['{{eq .Zone "us-east-1a"}}', "true"],
    ['{{eq .Tags.missing "a"}}', "false"],
    ["{{ne 1 2}}", "true"],
    ["{{lt 1 2}}", "true"],
    ['{{lt "a" "b"}}', "true"],
    ["{{lt 1.5 2.5}}", "true"],
    ["{{le 2 2}}", "true"],
    ["{{gt 3 2}}", "true"],
    ["{{ge 1 2}}", "false"],
    ["{{eq 'a' 97}}", "true"],
    // len, index, slice
    ["{{len .Tags}}", "2"],
    ['{{len "héllo"}}', "6"],
    ['{{index .Tags "env"}}', "prod"],
    ['{{index "abc" 1}}', "98"],
    ['{{slice "héllo" 1 3}}', "é"],
    ['{{slice "abc" 1}}', "bc"],
    // print, printf, println
    ['{{print 1 2 "a" "b" 3 nil}}', "1 2ab3 <nil>"],
    ['{{println 1 "a"}}', "1 a\n"],
    ['{{printf "%v %v %v %T %T %5.2f%%" 1 1.5 "s" 1 1.0 3.14159}}', "1 1.5 s int float64  3.14%"],
    [
      '{{printf "%-5s|%5s|%05d|%x|%X|%o|%b|%c|%q|%U" "a" "b" 42 255 255 8 5 65 "q" 65}}',
      'a    |    b|00042|ff|FF|10|101|A|"q"|U+0041',
    ],
    [
      '{{printf "%.3e %g %G %.2g %e" 1234.5678 0.000001 1e21 123.0 0.0}}',
      "1.235e+03 1e-06 1E+21 1.2e+02 0.000000e+00",
    ],
    ['{{printf "%.0f %.0f %.2f %.1f" 0.5 2.5 0.125 0.05}}', "0 2 0.12 0.1"],
    ['{{printf "%08.3f|%+.2e|% d|%+d" -3.14159 12345.678 5 5}}', "-003.142|+1.23e+04| 5|+5"],
    [
      '{{printf "%v|%s|%d" .Tags .Tags .Tags}}',
      "map[env:prod team:a&b]|map[env:prod team:a&b]|map[%!d(string=env):%!d(string=prod) %!d(string=team):%!d(string=a&b)]",
    ],
    ['{{printf "%#v" .Tags}}', 'map[string]string{"env":"prod", "team":"a&b"}'],
    ['{{printf "%[2]v %[1]v" 1 2}}', "2 1"],
    ['{{printf "%*d|%.*f" 5 3 2 3.14159}}', "    3|3.14"],
    ['{{printf "%d" "x"}}', "%!d(string=x)"],
    ['{{printf "%d %d" 1}}', "1 %!d(MISSING)"],
    ['{{printf "%d" 1 2}}', "1%!(EXTRA int=2)"],
    ['{{printf "%z %!" 1 2}}', "%!z(int=1) %!!(int=2)"],
    [
      '{{printf "%x|% x|%#x|%q|%+q|%#q" "hé" "hé" "hé" "a\\"b" "é" "a"}}',
      '68c3a9|68 c3 a9|0x68c3a9|"a\\"b"|"\\u00e9"|`a`',
    ],
    ['{{printf "%v %s" nil nil}}', "<nil> %!s(<nil>)"],
    ['{{printf "%t %v" true false}}', "true false"],
    ['{{printf "%x %b" 1.5 1.0}}', "0x1.8p+00 4503599627370496p-52"],
    // html, js, urlquery
    ['{{html "<a href=\'x\'>&\\"" 1}}', "&lt;a href=&#39;x&#39;&gt;&amp;&#34;1"],
    ['{{js "a\'b<>&=\\\\"}}', "a\\'b\\u003C\\u003E\\u0026\\u003D\\\\"],
    ['{{urlquery "a b&c=d/é~"}}', "a+b%26c%3Dd%2F%C3%A9~"],
    ["{{html .Tags.missing}}", "&lt;no value&gt;"],
    // the reference's functions
    ['{{default "none" .InternalDNS}}', "none"],
    ['{{.InternalDNS | default "none"}}', "none"],
    ['{{.Zone | default "none"}}', "us-east-1a"],
    ['{{default "d" .Tags.missing}}', "d"],
    ['{{default "d" 0}}', "d"],
    ['{{default "d" .Tags}}', "map[env:prod team:a&b]"],
    [
      "{{empty .Zone}} {{empty .InternalDNS}} {{empty 0}} {{empty .Tags}} {{empty nil}}",
      "false true true false true",
    ],
    ["{{coalesce .InternalDNS .ExternalDNS .Zone}}", "us-east-1a"],
    ['{{coalesce "" 0}}', "<no value>"],
    ['{{ternary "a" "b" .Spot}}', "a"],
    ['{{.Spot | ternary "spot" "on-demand"}}', "spot"],
    ['{{upper .Hostname}} {{lower "ÀB"}}', "WEB-1.EXAMPLE.COM àb"],
    ['{{upper "ßİıǅﬀ"}} {{lower "İΣǅ"}}', "ßİIǄﬀ iσǆ"],
    ['{{trim "  x \\t\\n"}}|{{trim "\\u0085x\\ufeff"}}', "x|x﻿"],
    ['{{trimSuffix ".example.com" .Hostname}}', "web-1"],
    ['{{trimPrefix "web-" .Hostname}}', "1.example.com"],
    ['{{trimSuffix "hello" "lo"}}', "lo"],
    ['{{replace "-" "_" .Hostname}}', "web_1.example.com"],
    ['{{replace "" "X" "abc"}}', "XaXbXcX"],
    ['{{regexFind "[a-zA-Z][1-9]" "abcd1234"}}', "d1"],
    ['{{regexFindString "^type-([a-z0-9]+)-(.*)$" "type-metal1-asz" 1}}', "metal1"],
    ['{{regexFindString "^web-([0-9]+)\\\\.(.*)$" .Hostname 2}}', "example.com"],
    ['{{regexFindString "^(a)|(b)$" "b" 1}}', ""],
    ['{{regexFindString "x" "y" 5}}', ""],
    ['{{regexReplaceAll "a(x*)b" "-ab-axxb-" "${1}W"}}', "-W-xxW-"],
    ['{{regexReplaceAll "a*" "baaac" "-"}}', "-b-c-"],
    ['{{regexReplaceAll "(?P<first>\\\\w+)-(\\\\w+)" .Zone "${2}.$first"}}', "east.us-1a"],
    ['{{regexFind (print "[0-9]" "+") .Zone}}', "1"],
    [
      '{{contains "lo" "hello"}} {{hasPrefix "he" "hello"}} {{hasSuffix "lo" "hello"}} {{contains "x" "hello"}}',
      "true true true false",
    ],
    ['{{b64enc "hello"}} {{b64dec "aGVsbG8="}} {{b64dec "aGVs\\nbG8="}}', "aGVsbG8= hello hello"],
    ['{{getValue "k=v;k2=v2" "k2"}}|{{getValue "k=v" "k3"}}|{{getValue "k=a=b" "k"}}', "v2||a"],
    // HTML characters (weakness 4)
    [
      '& \' " < > + {{ "& \' \\" < > +" }} {{.Tags.team}} {{ printf "%s" "<+>" }}',
      "& ' \" < > + & ' \" < > + a&b <+>",
    ],
  ])("parseTemplate(%j).execute()", (source, want) => {
    expect(render(source)).toBe(want);
  });
});

describe("parseTemplate() and execute() fail as Go does, with a position and a reason", () => {
  test.each<[string, "parse" | "exec", string, string]>([
    ["{{", "parse", "1:3", "unclosed action"],
    ["my-value-{{ .Spot", "parse", "1:18", "unclosed action"],
    ["{{.Zone}", "parse", "1:8", "bad character U+007D '}'"],
    ["a\n{{if .Zone}}x", "parse", "2:14", "unexpected EOF"],
    ["{{end}}", "parse", "1:3", "unexpected {{end}}"],
    ["{{else}}", "parse", "1:3", "unexpected {{else}}"],
    ["{{if .Zone}}a{{else}}b{{else}}c{{end}}", "parse", "1:25", "expected end; found {{else}}"],
    ["{{foo}}", "parse", "1:3", 'function "foo" not defined'],
    ["{{$x}}", "parse", "1:3", 'undefined variable "$x"'],
    ["{{range}}{{end}}", "parse", "1:8", "missing value for range"],
    ["{{.Zone | 3}}", "parse", "1:11", "non executable command in pipeline stage 2"],
    ["{{| upper}}", "parse", "1:3", 'unexpected "|" in command'],
    ["{{(.Zone}}", "parse", "1:9", "unclosed left paren"],
    ["{{.Zone)}}", "parse", "1:8", "unexpected right paren"],
    ["{{$x, $y := 1}}", "parse", "1:5", "too many declarations in command"],
    ["{{range $x, 3}}{{end}}", "parse", "1:13", "range can only initialize variables"],
    ["{{/* unclosed}}", "parse", "1:1", "unclosed comment"],
    ["{{/* a */ b}}", "parse", "1:1", "comment ends before closing delimiter"],
    ['{{"unterminated}}', "parse", "1:3", "unterminated quoted string"],
    ["{{break}}", "parse", "1:3", "{{break}} outside {{range}}"],
    ["{{3x}}", "parse", "1:4", 'bad number syntax: "3x"'],
    ["{{'ab'}}", "parse", "1:3", "malformed character constant: 'ab'"],
    ['{{"\\q"}}', "parse", "1:3", 'invalid syntax in string "\\q"'],
    ['{{"x".y}}', "parse", "1:3", 'unexpected . after term "\\"x\\""'],
    [
      '{{regexFind "(" .Zone}}',
      "parse",
      "1:13",
      "bad regular expression for regexFind: Cannot compile regexp `(`: missing closing ): `(`",
    ],
    [
      "{{.Nope}}",
      "exec",
      "1:3",
      "at <.Nope>: can't evaluate field Nope in type struct (fields: Platform, Hostname, Region, Zone, InstanceType, InstanceID, ProviderID, Spot, InternalDNS, ExternalDNS, Tags, Manufacturer, ProductName, Version, SerialNumber, UUID, WakeUpType, SKUNumber)",
    ],
    ["{{.Zone.x}}", "exec", "1:3", "at <.Zone.x>: can't evaluate field x in type string"],
    ["{{nil}}", "exec", "1:3", "at <nil>: nil is not a command"],
    ["{{1 2}}", "exec", "1:3", "at <1>: can't give argument to non-function 1"],
    ["{{.Zone 1}}", "exec", "1:3", "at <.Zone 1>: Zone has arguments but cannot be invoked as function"],
    ["{{upper 3}}", "exec", "1:9", "at <3>: expected string; found 3"],
    ["{{upper .Tags.missing}}", "exec", "1:9", "at <.Tags.missing>: invalid value; expected string"],
    ["{{upper}}", "exec", "1:3", "at <upper>: wrong number of args for upper: want 1 got 0"],
    [
      '{{eq 1 "a"}}',
      "exec",
      "1:3",
      'at <eq 1 "a">: error calling eq: incompatible types for comparison: int and string',
    ],
    [
      "{{eq 1 1.0}}",
      "exec",
      "1:3",
      "at <eq 1 1.0>: error calling eq: incompatible types for comparison: int and float64",
    ],
    ["{{lt true false}}", "exec", "1:3", "at <lt true false>: error calling lt: invalid type for comparison"],
    [
      "{{eq .Tags .Tags}}",
      "exec",
      "1:3",
      "at <eq .Tags .Tags>: error calling eq: non-comparable type map[string]string",
    ],
    ["{{len 3}}", "exec", "1:3", "at <len 3>: error calling len: len of type int"],
    [
      "{{index .Tags 1}}",
      "exec",
      "1:3",
      "at <index .Tags 1>: error calling index: value has type int; should be string",
    ],
    ['{{index "abc" 3}}', "exec", "1:3", 'at <index "abc" 3>: error calling index: index out of range: 3'],
    [
      '{{slice "abc" 2 1}}',
      "exec",
      "1:3",
      'at <slice "abc" 2 1>: error calling slice: invalid slice index: 2 > 1',
    ],
    ["{{range .Zone}}{{end}}", "exec", "1:9", "at <.Zone>: range can't iterate over us-east-1a"],
    [
      "{{range $i, $v := 3}}{{end}}",
      "exec",
      "1:19",
      "at <3>: can't use 3 to iterate over more than one variable",
    ],
    [
      '{{default "x"}}',
      "exec",
      "1:3",
      'at <default "x">: error calling default: runtime error: index out of range [0] with length 0',
    ],
    [
      '{{ternary "a" "b" .Zone}}',
      "exec",
      "1:19",
      "at <.Zone>: wrong type for value; expected bool; got string",
    ],
    [
      '{{regexFindString "x" "x" -1}}',
      "exec",
      "1:3",
      'at <regexFindString "x" "x" -1>: error calling regexFindString: runtime error: index out of range [-1]',
    ],
    [
      '{{regexFind (print "(") .Zone}}',
      "exec",
      "1:3",
      'at <regexFind (print "(") .Zone>: error calling regexFind: Cannot compile regexp `(`: missing closing ): `(`',
    ],
    [
      '{{b64dec "aGVsbG8"}}',
      "exec",
      "1:3",
      'at <b64dec "aGVsbG8">: error calling b64dec: illegal base64 data at input byte 4',
    ],
    [
      '{{getValue "k;x=1" "k"}}',
      "exec",
      "1:3",
      'at <getValue "k;x=1" "k">: error calling getValue: runtime error: index out of range [1] with length 1',
    ],
    ["{{$x := 1}}{{$x.y}}", "exec", "1:14", "at <$x.y>: can't evaluate field y in type int"],
    ["{{printf}}", "exec", "1:3", "at <printf>: wrong number of args for printf: want at least 1 got 0"],
    ["{{and}}", "exec", "1:3", "at <and>: wrong number of args for and: want at least 1 got 0"],
  ])("parseTemplate(%j) fails at %s", (source, code, position, reason) => {
    const err = failure(source);
    expect({ code: err.code, position: `${err.line}:${err.column}`, reason: err.reason }).toEqual({
      code,
      position,
      reason,
    });
    expect(err.message).toBe(
      `Cannot ${code === "parse" ? "parse" : "execute"} template "t": ${position}: ${reason}`,
    );
  });
});

describe("parseTemplate() does not escape HTML (weakness 4)", () => {
  test("parseTemplate() passes & ' \" < > + through unchanged, in text, constants and data", () => {
    const values = { ...data, Hostname: `a&b'c"d<e>f+g` };
    expect(render(`x & ' " < > + {{ .Hostname }} {{ "<&>" }} {{ printf "%s+%s" "<" ">" }}`, values)).toBe(
      `x & ' " < > + a&b'c"d<e>f+g <&> <+>`,
    );
  });

  test("parseTemplate() escapes only where a template asks for it", () => {
    expect(render(`{{ html "<b>&" }} {{ urlquery "a+b c" }} {{ js "<'>" }}`)).toBe(
      "&lt;b&gt;&amp; a%2Bb+c \\u003C\\'\\u003E",
    );
  });
});

describe("templates on a node without tags", () => {
  test("empty and default see its .Tags as the reference's nil map: empty, while printing shows map[]", () => {
    const t = parseTemplate('{{empty .Tags}} {{default "d" .Tags}} {{.Tags}} {{len .Tags}}', "t");
    expect(t.execute({ ...data, Tags: {} })).toBe("true d map[] 0");
  });
});

describe("parseTemplate() parses once", () => {
  test("parseTemplate() result executes many times with different data", () => {
    const t: Template = parseTemplate("{{ .Hostname | upper }}/{{ .Tags.env }}", "t");
    expect(t.source).toBe("{{ .Hostname | upper }}/{{ .Tags.env }}");
    expect(t.execute({ ...data, Hostname: "a" })).toBe("A/prod");
    expect(t.execute({ ...data, Hostname: "b", Tags: {} })).toBe("B/<no value>");
    expect(t.execute({ ...data, Hostname: "a" })).toBe("A/prod");
  });

  test("parseTemplate() compiles a constant regex at parse time, so a bad one fails at load", () => {
    expect(failure('{{ regexFind "a(" .Hostname }}').code).toBe("parse");
    expect(failure('{{ .Zone | regexReplaceAll "[" "x" }}').code).toBe("parse");
    expect(failure('{{ regexFindString "(?=x)" .Zone 1 }}').reason).toContain(
      "lookahead is not supported by RE2",
    );
  });

  test("parseTemplate() leaves a computed regex to execution time", () => {
    const t = parseTemplate('{{ regexFind (printf "%s" .Zone) "x" }}', "t");
    expect(t.execute({ ...data, Zone: "x+" })).toBe("x");
    expect(() => t.execute({ ...data, Zone: "x(" })).toThrow(TemplateError);
  });

  test("parseTemplate() names the template in every error", () => {
    expect(() => parseTemplate("{{ .Zone", "labels[web]")).toThrow(
      'Cannot parse template "labels[web]": 1:9: unclosed action',
    );
    expect(() => parseTemplate("{{ .Zone").execute(data)).toThrow('Cannot parse template "template"');
  });

  test("parseTemplate() counts lines and columns in characters", () => {
    const err = failure("é😀\n  {{ .Nope }}");
    expect([err.line, err.column]).toEqual([2, 6]);
  });
});

describe("execute() data model", () => {
  test("execute() treats the data object as a struct: unknown fields are errors, map keys are not", () => {
    expect(failure("{{ .tags }}").reason).toContain("can't evaluate field tags in type struct");
    expect(render('{{ .Tags.nope }}|{{ index .Tags "nope" }}')).toBe("<no value>|");
  });

  test("execute() treats nested plain objects and Maps as maps, sorted by key", () => {
    const values = {
      M: new Map([
        ["b", "2"],
        ["a", "1"],
      ]),
      O: { z: { k: "v" }, a: "x" },
    };
    expect(
      render("{{ .M }} {{ .M.a }} {{ range $k, $v := .O }}{{ $k }};{{ end }} {{ .O.z.k }}", values),
    ).toBe("map[a:1 b:2] 1 a;z; v");
  });

  test("execute() reads integral numbers as int and others as float64, null as nil", () => {
    const values = { I: 3, F: 1.5, N: null, L: [1, "a", null] };
    expect(render('{{ printf "%T %T %v" .I .F .N }} {{ eq .I 3 }} {{ .L }} {{ len .L }}', values)).toBe(
      "int float64 <nil> true [1 a <nil>] 3",
    );
    expect(failure("{{ eq .F 3 }}", values).reason).toContain(
      "incompatible types for comparison: float64 and int",
    );
  });

  test("execute() accepts any value as dot", () => {
    expect(render("<{{ . }}>", "hello")).toBe("<hello>");
    expect(render("<{{ . }}>", [1, 2])).toBe("<[1 2]>");
    expect(parseTemplate("<{{ . }}>").execute(undefined)).toBe("<<no value>>");
    expect(parseTemplate("{{ .foo }}").execute(null)).toBe("<no value>");
    expect(failure("{{ .M }}", { M: new Map([[1, "a"]]) }).reason).toContain("unsupported map key");
  });

  test("execute() refuses JavaScript values Go has no kind for", () => {
    expect(failure("{{ .D }}", { D: new Date(0) }).reason).toContain("unsupported data value");
    expect(failure("{{ .F }}", { F: () => 1 }).reason).toContain("unsupported data value");
  });

  test("execute() prints the data as Go prints the reference's struct pointer", () => {
    const values = { A: "x", B: false };
    expect(render('{{ . }}|{{ print . }}|{{ printf "%+v" . }}', values)).toBe(
      "{x false}|&{x false}|&{A:x B:false}",
    );
  });
});

describe("execute() limits", () => {
  test("execute() stops a runaway range with a TemplateError", () => {
    const err = failure("{{ range 1000000000 }}x{{ end }}");
    expect(err.code).toBe("exec");
    expect(err.reason).toContain("execution exceeded 1000000 steps");
  });

  test("execute() stops output beyond 1 MiB", () => {
    expect(failure('{{ range 10000 }}{{ printf "%200d" 1 }}{{ end }}').reason).toContain(
      "output exceeds 1048576",
    );
  });

  test("execute() stops intermediate strings beyond 1 MiB before building them", () => {
    const bomb = '{{ replace "" "0123456789" (replace "" "0123456789" (printf "%100000d" 1)) }}';
    expect(failure(bomb).reason).toContain("result exceeds 1048576 characters");
  });

  test("parseTemplate() refuses nesting deeper than 100 levels", () => {
    const parens = `{{ ${"(".repeat(101)}1${")".repeat(101)} }}`;
    expect(failure(parens).reason).toBe("nesting deeper than 100 levels");
    const ifs = `${"{{ if 1 }}".repeat(101)}x${"{{ end }}".repeat(101)}`;
    expect(failure(ifs).reason).toBe("nesting deeper than 100 levels");
    expect(render(`${"{{ if 1 }}".repeat(100)}x${"{{ end }}".repeat(100)}`)).toBe("x");
  });

  test("execute() refuses to print cyclic data", () => {
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect(failure("{{ .C }}", { C: cyclic }).reason).toContain("nested more than 100 levels");
  });

  test("execute() matches regexes in linear time", () => {
    expect(render('{{ regexFind "(a+)+b" (printf "%05000d" 0 | replace "0" "a") }}')).toBe("");
  });
});

describe("parseTemplate() documented divergences from Go", () => {
  test.each<[string, string]>([
    ['{{ define "x" }}{{ end }}', "{{define}} is not supported: each value is a single template"],
    ['{{ template "x" }}', "{{template}} is not supported: each value is a single template"],
    ['{{ block "x" . }}{{ end }}', "{{block}} is not supported: each value is a single template"],
    ["{{ 1i }}", "complex numbers are not supported"],
    ["{{ 1+2i }}", "complex numbers are not supported"],
    ["{{ 9223372036854775808 }}", 'illegal number syntax: "9223372036854775808"'],
  ])("parseTemplate(%j) is refused at parse time", (source, reason) => {
    const err = failure(source);
    expect({ code: err.code, reason: err.reason }).toEqual({ code: "parse", reason });
  });
});

describe("parseTemplate() properties", () => {
  const tokens = fc.constantFrom(
    "{{",
    "}}",
    "{{- ",
    " -}}",
    "{{/*",
    "*/}}",
    " ",
    "\n",
    "x",
    ".",
    ".Hostname",
    ".Tags",
    ".Tags.env",
    ".Nope",
    "$",
    "$x",
    ":=",
    "=",
    "|",
    "(",
    ")",
    ",",
    "if ",
    "else ",
    "end",
    "range ",
    "with ",
    "break",
    "continue",
    "define",
    "nil",
    "true",
    "1",
    "-1",
    "2.5",
    "'a'",
    "`r`",
    '"%v %d %5.2f %q"',
    '"[a-z]+"',
    '"("',
    "printf ",
    "print ",
    "index ",
    "slice ",
    "len ",
    "and ",
    "or ",
    "not ",
    "eq ",
    "lt ",
    "default ",
    "upper ",
    "replace ",
    "regexFind ",
    "regexReplaceAll ",
    "b64dec ",
    "getValue ",
    "ternary ",
  );
  const soup = fc.array(tokens, { maxLength: 30 }).map((t) => t.join(""));
  const values = fc.oneof(
    fc.constant(data),
    fc.dictionary(
      fc.constantFrom("Hostname", "Tags", "Zone", "x"),
      fc.anything({
        withMap: true,
        withBigInt: true,
        withNullPrototype: true,
        withSparseArray: true,
        maxDepth: 3,
      }),
    ),
    fc.anything({ withMap: true, withBigInt: true, maxDepth: 3 }),
  );

  /** Runs `source` and returns whether it rendered; anything but a TemplateError fails the property. */
  function renders(source: string, values: unknown): boolean {
    try {
      expect(typeof parseTemplate(source, "p").execute(values)).toBe("string");
      return true;
    } catch (err) {
      if (err instanceof TemplateError) return false;
      throw err;
    }
  }

  test("parseTemplate() throws nothing but TemplateError on random token soup", () => {
    fc.assert(
      fc.property(soup, values, (source, v) => {
        renders(source, v);
      }),
      { numRuns: 3000 },
    );
  });

  test("parseTemplate() throws nothing but TemplateError on random well-formed templates", () => {
    const operand = fc.constantFrom(
      ".Hostname",
      ".Tags",
      ".Tags.env",
      ".",
      "$",
      "$x",
      "1",
      "0",
      "-2",
      "1.5",
      '""',
      '"a-b"',
      "nil",
      "true",
      '"%v|%s"',
      '"^(\\\\w+)-(\\\\d+)$"',
      "(len .Tags)",
      "(print .Zone)",
    );
    const fn = fc.constantFrom(
      "printf",
      "print",
      "index",
      "slice",
      "len",
      "and",
      "or",
      "not",
      "eq",
      "ne",
      "lt",
      "ge",
      "default",
      "empty",
      "coalesce",
      "ternary",
      "upper",
      "trim",
      "trimSuffix",
      "replace",
      "regexFind",
      "regexFindString",
      "regexReplaceAll",
      "contains",
      "b64enc",
      "b64dec",
      "getValue",
      "html",
      "js",
      "urlquery",
    );
    const command = fc.oneof(
      operand,
      fc.tuple(fn, fc.array(operand, { maxLength: 3 })).map(([f, a]) => [f, ...a].join(" ")),
    );
    const pipeline = fc.array(command, { minLength: 1, maxLength: 3 }).map((cmds) => cmds.join(" | "));
    const { body } = fc.letrec((tie) => ({
      body: fc.oneof(
        { depthSize: "small" },
        fc.constantFrom("x", " ", "<&>"),
        pipeline.map((p) => `{{ ${p} }}`),
        fc
          .tuple(pipeline, tie("body"), tie("body"))
          .map(([p, a, b]) => `{{ if ${p} }}${a}{{ else }}${b}{{ end }}`),
        fc.tuple(pipeline, tie("body")).map(([p, a]) => `{{ with $y := ${p} }}${a}{{ end }}`),
        fc
          .tuple(fc.constantFrom(".Tags", "3", ".Zone", "nil", "(len .Hostname)"), tie("body"), fc.boolean())
          .map(
            ([p, a, stop]) =>
              `{{ range $i, $v := ${p} }}${a}${stop ? "{{ break }}" : "{{ continue }}"}{{ end }}`,
          ),
        fc.tuple(tie("body"), tie("body")).map(([a, b]) => `${a}${b}`),
      ),
    }));
    fc.assert(
      fc.property(body, values, (source, v) => {
        renders(`{{ $x := .Zone }}${source}`, v);
      }),
      { numRuns: 2000 },
    );
  });

  test("parseTemplate() renders text without actions unchanged", () => {
    const text = fc.string({ maxLength: 40 }).filter((s) => !s.includes("{{"));
    fc.assert(
      fc.property(text, (s) => {
        expect(render(s)).toBe(s);
      }),
      { numRuns: 1000 },
    );
  });
});

describe("Template.mayRead()", () => {
  test.each<[string, string, boolean]>([
    ["a field it names", "{{ .UUID }}", true],
    ["a field it does not name", '{{ .Zone }}-{{ index .Tags "env" }}', false],
    ["a field named through $", "{{ with .Tags }}{{ $.UUID }}{{ end }}", true],
    ["a field named through a variable bound to the data", "{{ $d := . }}{{ $d.UUID }}", true],
    ["a field named after a parenthesized pipeline", "{{ (.).UUID }}", true],
    ["a map key of the same name (over-approximated)", "{{ .Tags.UUID }}", true],
    ["the data printed", "{{ . }}", true],
    ["$ printed", "{{ $ }}", true],
    ["the data given to a function", '{{ printf "%v" . }}', true],
    ["the data piped into a function", '{{ $ | printf "%v" }}', true],
    ["the data given to index", '{{ index . "UUID" }}', true],
    ["the data ranged over (its error prints it)", "{{ range . }}{{ end }}", true],
    ["dot bound to the data by with, printed", "{{ with $ }}{{ . }}{{ end }}", true],
    ["dot bound to the data by with, one field read", "{{ with $ }}{{ .Zone }}{{ end }}", false],
    ["dot bound to a map by with, printed", "{{ with .Tags }}{{ . }}{{ end }}", false],
    ["range variables printed", "{{ range $k, $v := .Tags }}{{ $k }}={{ $v }}{{ end }}", false],
    ["range elements printed", "{{ range .Tags }}{{ . }}{{ end }}", false],
    ["the data only tested for truth", "{{ if . }}yes{{ end }}", false],
    ["a variable bound to the data, printed", "{{ $d := $ }}{{ $d }}", true],
    ["a variable bound to a string, printed", "{{ $d := .Zone }}{{ $d }}", false],
    [
      "a variable that becomes the data in a later range iteration",
      '{{ $d := "" }}{{ range .Tags }}{{ $d }}{{ $d = $ }}{{ end }}',
      true,
    ],
  ])("Template.mayRead() of UUID in %s", (_name, source, want) => {
    expect(parseTemplate(source, "t").mayRead("UUID")).toBe(want);
  });

  test("Template.mayRead() is sound: a field it says is not read never changes the output", () => {
    const value = fc.constantFrom(
      ".Zone",
      ".UUID",
      "$.UUID",
      ".",
      "$",
      "$x",
      ".Tags",
      ".Tags.env",
      '"lit"',
      "(.)",
    );
    const { list } = fc.letrec<{ node: string; list: string }>((tie) => ({
      node: fc.oneof(
        { depthSize: "small", withCrossShrink: true },
        value.map((v) => `{{ ${v} }}`),
        value.map((v) => `{{ printf "%v" ${v} }}`),
        value.map((v) => `{{ ${v} | len }}`),
        value.map((v) => `{{ $x = ${v} }}`),
        fc.tuple(value, tie("list")).map(([v, body]) => `{{ with ${v} }}${body}{{ end }}`),
        fc
          .tuple(value, tie("list"), tie("list"))
          .map(([v, a, b]) => `{{ if ${v} }}${a}{{ else }}${b}{{ end }}`),
        fc.tuple(value, tie("list")).map(([v, body]) => `{{ range ${v} }}${body}{{ end }}`),
        fc.constant("-"),
      ),
      list: fc.array(tie("node"), { maxLength: 3 }).map((nodes) => nodes.join("")),
    }));
    const outcome = (t: Template, values: unknown) => {
      try {
        return t.execute(values);
      } catch (err) {
        return `error: ${(err as Error).message}`;
      }
    };
    fc.assert(
      fc.property(value, list, fc.constantFrom("UUID", "Zone"), (init, body, field) => {
        const t = parseTemplate(`{{ $x := ${init} }}${body}`, "t");
        if (t.mayRead(field)) return;
        expect(outcome(t, { ...data, [field]: "changed" })).toBe(outcome(t, data));
      }),
      { numRuns: 3000 },
    );
  });
});

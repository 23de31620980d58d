// Reading TypeScript source as text for the tests that check lib/'s shape (tests/unit/layers.test.ts,
// tests/unit/decisionpaths.test.ts): comments, strings and regular expressions blanked, and the imports a
// file makes.

/** Characters that, as the last code before a `/`, make it the start of a regular expression literal. */
const REGEX_BEFORE = new Set([..."(,=:[!&|?{};+-*%<>~^"]);
const REGEX_KEYWORDS = /\b(?:return|typeof|case|of|in|do|else|void|yield|await|delete|throw)$/;

/**
 * The source with comments blanked (`code`) and with comments, strings, template text and regular
 * expression literals blanked (`bare`), line breaks kept. Template substitutions stay code.
 */
export function strip(src: string): { code: string; bare: string } {
  let code = "";
  let bare = "";
  const out = (s: string, keepInCode: boolean) => {
    code += keepInCode ? s : s.replace(/[^\n]/g, " ");
    bare += s.replace(/[^\n]/g, " ");
  };
  const templates: number[] = []; // brace depth at each open `${`
  let depth = 0;
  let i = 0;
  const lastCode = () => bare.replace(/\s+$/, "");
  const inTemplate = () => {
    let j = i;
    while (j < src.length) {
      const c = src[j];
      if (c === "\\") j += 2;
      else if (c === "`") {
        out(src.slice(i, j + 1), true);
        i = j + 1;
        return;
      } else if (c === "$" && src[j + 1] === "{") {
        out(src.slice(i, j + 2), true);
        i = j + 2;
        templates.push(depth);
        depth++;
        return;
      } else j++;
    }
    out(src.slice(i), true);
    i = src.length;
  };
  while (i < src.length) {
    const c = src[i] as string;
    const next = src[i + 1];
    if (c === "/" && next === "/") {
      const end = src.indexOf("\n", i);
      const stop = end < 0 ? src.length : end;
      out(src.slice(i, stop), false);
      i = stop;
    } else if (c === "/" && next === "*") {
      const end = src.indexOf("*/", i + 2);
      const stop = end < 0 ? src.length : end + 2;
      out(src.slice(i, stop), false);
      i = stop;
    } else if (c === '"' || c === "'") {
      let j = i + 1;
      while (j < src.length && src[j] !== c && src[j] !== "\n") j += src[j] === "\\" ? 2 : 1;
      out(src.slice(i, j + 1), true);
      i = j + 1;
    } else if (c === "`") {
      out("`", true);
      i++;
      inTemplate();
    } else if (c === "/") {
      const before = lastCode();
      const prev = before[before.length - 1];
      if (prev === undefined || REGEX_BEFORE.has(prev) || REGEX_KEYWORDS.test(before)) {
        let j = i + 1;
        let inClass = false;
        while (j < src.length && src[j] !== "\n") {
          const d = src[j];
          if (d === "\\") j++;
          else if (d === "[") inClass = true;
          else if (d === "]") inClass = false;
          else if (d === "/" && !inClass) break;
          j++;
        }
        while (j + 1 < src.length && /[a-z]/.test(src[j + 1] as string)) j++;
        out(src.slice(i, j + 1), true);
        i = j + 1;
      } else {
        code += c;
        bare += c;
        i++;
      }
    } else if (c === "{") {
      depth++;
      code += c;
      bare += c;
      i++;
    } else if (c === "}") {
      depth--;
      if (templates.length > 0 && templates[templates.length - 1] === depth) {
        templates.pop();
        out("}", true);
        i++;
        inTemplate();
      } else {
        code += c;
        bare += c;
        i++;
      }
    } else {
      code += c;
      bare += c;
      i++;
    }
  }
  return { code, bare };
}

export type Import = { specifier: string; typeOnly: boolean; line: number };

/** Every import and re-export of a file (static, type-only, dynamic), from its comment-free code. */
export function importsOf(code: string): Import[] {
  const found: Import[] = [];
  const lineAt = (index: number) => code.slice(0, index).split("\n").length;
  for (const m of code.matchAll(/\b(import|export)\s+(type\s+)?([^;'"]*?)\bfrom\s*["']([^"']+)["']/g)) {
    const names = m[3] ?? "";
    const allTypes =
      /^\{[^}]*\}\s*$/.test(names.trim()) &&
      names
        .replace(/[{}\s]/g, "")
        .split(",")
        .filter(Boolean)
        .every((n) => n.startsWith("type"));
    found.push({ specifier: m[4] as string, typeOnly: Boolean(m[2]) || allTypes, line: lineAt(m.index) });
  }
  for (const m of code.matchAll(/\bimport\s*["']([^"']+)["']/g))
    found.push({ specifier: m[1] as string, typeOnly: false, line: lineAt(m.index) });
  for (const m of code.matchAll(/\bimport\s*\(\s*["']([^"']+)["']\s*\)/g))
    found.push({ specifier: m[1] as string, typeOnly: false, line: lineAt(m.index) });
  return found;
}

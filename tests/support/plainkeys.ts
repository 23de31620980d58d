// The check behind issue 40's rule "keys a peer chooses never index a plain object": a type-aware scan
// of TypeScript sources, through the TypeScript 7 compiler's own API (typescript/unstable/async, the
// Go compiler spoken to over a pipe), for every place a string the code does not fix in advance
// indexes an object:
//
//   o[k]  o[k] = v  o[k] ??= v  delete o[k]   where k's type is `string` (or a template literal, or
//                                             any): not a union of literals, not a number
//   k in o                                    the same k, whatever o is
//   Object.assign({…}, m)                     m's type is `any` or has a string index signature: a
//                                             plain target, whose `__proto__` setter a key of m calls
//
// With `noImplicitAny` such an access only compiles on an object with a string index signature
// (Record<string, …>, `{ [k: string]: … }`, Object.fromEntries' result) or on `any`, so this finds
// the plain objects used as maps. On an ordinary object, a key such as `constructor`, `toString` or
// `__proto__` reads an inherited member instead of "no entry", `in` says yes to it, and a write of
// `__proto__` replaces the object's prototype instead of adding an entry.
//
// Not reported, because they are safe by construction:
// - an object whose declaration initialises it with a null prototype (`Object.create(null)`,
//   lib/dict.ts' `dict()`, or `Object.assign(` either `, …)`), read or written through that name;
// - a read guarded by `Object.hasOwn(o, k)` in an enclosing `if`, `?:` or `&&` condition, or by
//   `!Object.hasOwn(o, k) || …` (same o, k), and `o[k]` inside `for (const k in o)`.
// Everything else is a finding; the test that runs this keeps an allowlist of the safe rest, each
// entry a code fragment and its reason, never a line number.

import { type Node, type SourceFile, SyntaxKind } from "typescript/unstable/ast";
import { API, type Project, type Type, TypeFlags } from "typescript/unstable/async";

/** One place a non-literal string indexes an object. */
export interface KeyFinding {
  /** The file, relative to the project's directory (e.g. `lib/node.ts`). */
  readonly file: string;
  /** 1-based line of the access. */
  readonly line: number;
  /** `index` (o[k], read, write or delete), `in` (k in o) or `assign` (Object.assign({…}, map)). */
  readonly kind: "index" | "in" | "assign";
  /** The access itself, as written (whitespace collapsed). */
  readonly code: string;
  /** The whole source line, trimmed: what an allowlist fragment is matched against. */
  readonly lineText: string;
}

/** One allowed finding: the file, a fragment of its line, and why it is safe (or who fixes it). */
export interface KeyAllowance {
  readonly file: string;
  readonly fragment: string;
  readonly reason: string;
}

interface Candidate {
  readonly kind: "index" | "in" | "assign";
  readonly access: Node;
  readonly object: Node;
  readonly key: Node;
}

const WIDE = TypeFlags.String | TypeFlags.TemplateLiteral | TypeFlags.StringMapping | TypeFlags.Any;

/** Initializers that give an object a null prototype (lib/dict.ts' `dict()` is one). */
const NULL_PROTO_INIT =
  /^(?:Object\.create\(null\)|Object\.assign\(\s*(?:Object\.create\(null\)|dict(?:<[^>]*>)?\(\))|dict(?:<[^>]*>)?\(\))/;

/** Strips parentheses, `as`, `satisfies` and `!` around an expression. */
function bare(node: Node): Node {
  let n = node;
  for (;;) {
    if (
      n.kind === SyntaxKind.ParenthesizedExpression ||
      n.kind === SyntaxKind.AsExpression ||
      n.kind === SyntaxKind.SatisfiesExpression ||
      n.kind === SyntaxKind.NonNullExpression
    )
      n = (n as unknown as { expression: Node }).expression;
    else return n;
  }
}

function candidates(sf: SourceFile): Candidate[] {
  const out: Candidate[] = [];
  const visit = (node: Node): void => {
    if (node.kind === SyntaxKind.ElementAccessExpression) {
      const n = node as unknown as { expression: Node; argumentExpression: Node };
      out.push({ kind: "index", access: node, object: n.expression, key: n.argumentExpression });
    } else if (node.kind === SyntaxKind.BinaryExpression) {
      const n = node as unknown as { left: Node; right: Node; operatorToken: Node };
      if (n.operatorToken.kind === SyntaxKind.InKeyword && n.left.kind !== SyntaxKind.PrivateIdentifier)
        out.push({ kind: "in", access: node, object: n.right, key: n.left });
    }
    if (node.kind === SyntaxKind.CallExpression) {
      const n = node as unknown as { expression: Node; arguments: readonly Node[] };
      const [target, ...sources] = n.arguments;
      if (target?.kind === SyntaxKind.ObjectLiteralExpression && n.expression.getText(sf) === "Object.assign")
        for (const source of sources) out.push({ kind: "assign", access: node, object: target, key: source });
    }
    node.forEachChild(visit);
  };
  sf.forEachChild(visit);
  return out;
}

/** Whether a source of Object.assign is a map of keys the code does not fix: `any`, or a string index. */
async function isMapLike(project: Project, t: Type | undefined): Promise<boolean> {
  if (t === undefined) return false;
  if (t.flags & TypeFlags.Any) return true;
  if (t.isUnionType() || t.isIntersectionType()) {
    for (const m of (await t.getTypes()) ?? []) if (await isMapLike(project, m)) return true;
    return false;
  }
  const infos = await project.checker.getIndexInfosOfType(t);
  for (const info of infos) if (await isWide(info.keyType)) return true;
  return false;
}

async function isWide(t: Type | undefined): Promise<boolean> {
  if (t === undefined) return false;
  if (t.flags & WIDE) return true;
  if (t.isUnionType() || t.isIntersectionType()) {
    for (const m of (await t.getTypes()) ?? []) if (await isWide(m)) return true;
  }
  return false;
}

const text = (sf: SourceFile, n: Node) => n.getText(sf).replace(/\s+/g, " ");

type Field = "expression" | "thenStatement" | "whenTrue" | "condition" | "left" | "right" | "operatorToken";
const field = (n: Node, f: Field) => (n as unknown as Record<Field, Node>)[f];

/**
 * The condition that holds where `child` (a direct child of `p`) runs, and whether it holds negated:
 * an `if`'s then-branch, a `?:`'s true branch, the right of `&&` (as is), the right of `||` (negated).
 */
function conditionOver(p: Node, child: Node): { cond: Node; negated: boolean } | undefined {
  if (p.kind === SyntaxKind.IfStatement && field(p, "thenStatement") === child)
    return { cond: field(p, "expression"), negated: false };
  if (p.kind === SyntaxKind.ConditionalExpression && field(p, "whenTrue") === child)
    return { cond: field(p, "condition"), negated: false };
  if (p.kind !== SyntaxKind.BinaryExpression || field(p, "right") !== child) return undefined;
  const op = field(p, "operatorToken").kind;
  if (op === SyntaxKind.AmpersandAmpersandToken) return { cond: field(p, "left"), negated: false };
  if (op === SyntaxKind.BarBarToken) return { cond: field(p, "left"), negated: true };
  return undefined;
}

/**
 * Whether the key is safe where it is used: an enclosing condition checks `Object.hasOwn(o, k)` for
 * this very o and k (`!Object.hasOwn(o, k) || …` too), or k is the variable of a `for (k in o)` over
 * this very o.
 */
function guarded(sf: SourceFile, c: Candidate): boolean {
  const o = text(sf, bare(c.object));
  const k = text(sf, c.key);
  const want = `Object.hasOwn(${o}, ${k})`;
  let child: Node = c.access;
  for (let p = child.parent; p !== undefined && p.kind !== SyntaxKind.SourceFile; child = p, p = p.parent) {
    if (p.kind === SyntaxKind.ForInStatement) {
      const init = text(sf, (p as unknown as { initializer: Node }).initializer);
      if (init.replace(/^(?:const|let|var) /, "") === k && text(sf, field(p, "expression")) === o)
        return true;
    }
    const over = conditionOver(p, child);
    if (over === undefined) continue;
    const cond = text(sf, over.cond);
    const at = cond.indexOf(want);
    if (at >= 0 && (cond[at - 1] === "!") === over.negated) return true;
  }
  return false;
}

/** Whether the object is a name whose declaration gives it a null prototype. */
async function nullProto(project: Project, object: Node): Promise<boolean> {
  const o = bare(object);
  if (o.kind !== SyntaxKind.Identifier && o.kind !== SyntaxKind.PropertyAccessExpression) return false;
  const sym = await project.checker.getSymbolAtLocation(o);
  const decl = await sym?.valueDeclaration?.resolve(project);
  const init = (decl as unknown as { initializer?: Node } | undefined)?.initializer;
  return init !== undefined && NULL_PROTO_INIT.test(init.getText(init.getSourceFile()));
}

/**
 * Scans files of an open project for plain objects indexed by a non-literal string.
 * @param project an open project (see {@link openProject})
 * @param dir the project's directory, to make the files' names relative
 * @param files absolute paths of the files to scan
 * @returns every finding not safe by construction, in file and line order
 */
export async function scanPlainKeys(project: Project, dir: string, files: readonly string[]) {
  const found: KeyFinding[] = [];
  for (const file of files) {
    const sf = (await project.program.getSourceFile(file)) as SourceFile | undefined;
    if (sf === undefined) throw new Error(`Cannot scan ${file}: not part of the project`);
    const cands = candidates(sf);
    if (cands.length === 0) continue;
    const keyTypes = await project.checker.getTypeAtLocation(cands.map((c) => c.key));
    const lines = sf.text.split("\n");
    for (const [i, c] of cands.entries()) {
      const wide = c.kind === "assign" ? await isMapLike(project, keyTypes[i]) : await isWide(keyTypes[i]);
      if (!wide) continue;
      if (c.kind === "index" && guarded(sf, c)) continue;
      if (await nullProto(project, c.object)) continue;
      const line = sf.text.slice(0, c.access.getStart(sf)).split("\n").length;
      found.push({
        file: file.startsWith(`${dir}/`) ? file.slice(dir.length + 1) : file,
        line,
        kind: c.kind,
        code: text(sf, c.access),
        lineText: (lines[line - 1] ?? "").trim(),
      });
    }
  }
  return found;
}

/**
 * Starts the TypeScript 7 compiler's API and opens the project of a tsconfig.json.
 * @param tsconfig absolute path of the project's tsconfig.json
 * @returns the project and a function that stops the compiler
 */
export async function openProject(
  tsconfig: string,
): Promise<{ project: Project; close: () => Promise<void> }> {
  const api = new API({ cwd: tsconfig.slice(0, tsconfig.lastIndexOf("/")) });
  const snapshot = await api.updateSnapshot({ openProject: tsconfig });
  const project = snapshot.getProject(tsconfig) ?? snapshot.getProjects()[0];
  if (project === undefined) throw new Error(`Cannot open ${tsconfig}: the compiler found no project`);
  return { project, close: () => api.close() };
}

/**
 * Splits findings into those an allowance covers and those none does, and names allowances that
 * cover nothing (stale: the code they allowed is gone).
 */
export function applyAllowlist(found: readonly KeyFinding[], allow: readonly KeyAllowance[]) {
  const used = new Set<KeyAllowance>();
  const denied: KeyFinding[] = [];
  for (const f of found) {
    const a = allow.find((x) => x.file === f.file && f.lineText.includes(x.fragment));
    if (a === undefined) denied.push(f);
    else used.add(a);
  }
  return { denied, stale: allow.filter((a) => !used.has(a)) };
}

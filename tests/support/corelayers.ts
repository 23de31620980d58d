// The syntax-tree half of lib/'s layering check (tests/unit/layers.test.ts): in a core file, every
// use of a runtime global that reads a clock, schedules work, draws randomness, touches the process or
// does I/O, found on the TypeScript 7 compiler's syntax tree (typescript/unstable/ast) and resolved
// by its checker (a local of the same name, or a property of that name, is no such use):
//
//   Date          anything but `new Date(x…)`, `Date.parse(…)`, `Date.UTC(…)` and types: `Date.now()`,
//                 `Date["now"]()`, `const { now } = Date`, `const D = Date`, `new Date()`, `Date()`
//   Math          `Math.random`, `Math["random"]`, and any use of Math that is not a member access
//   globals       performance, process, console, crypto (Web Crypto), Bun, fetch, the timers,
//                 queueMicrotask, require, eval, Function, globalThis, window, self, global
//   import.meta   the module's location on disk
//   random names  randomBytes, randomUUID, randomInt, randomFill…, getRandomValues, imported or read
//                 from node:crypto under any name
//
// A text scan passes `Date["now"]()`, `const { now } = Date`, `console.log` and `crypto.subtle`;
// these are references to the globals here and are found.

import { type Node, type SourceFile, SyntaxKind } from "typescript/unstable/ast";
import type { Project } from "typescript/unstable/async";

/** One import of a file: what it names, whether only types come of it, and its line. */
export interface TreeImport {
  readonly specifier: string;
  readonly typeOnly: boolean;
  readonly line: number;
}

/**
 * The imports of a file on its syntax tree: `import … from`, `export … from`, `import x = require(…)`
 * and `import(…)`; type-only when the declaration or every name it imports is (`import type`,
 * `import { type A, type B }`).
 */
export function importsOfTree(sf: SourceFile): TreeImport[] {
  const out: TreeImport[] = [];
  const line = (n: Node) => sf.text.slice(0, n.getStart(sf)).split("\n").length;
  const literal = (n: Node | undefined) =>
    n !== undefined &&
    (n.kind === SyntaxKind.StringLiteral || n.kind === SyntaxKind.NoSubstitutionTemplateLiteral)
      ? f<string>(n, "text")
      : undefined;
  const visit = (node: Node): void => {
    if (node.kind === SyntaxKind.ImportDeclaration || node.kind === SyntaxKind.ExportDeclaration) {
      const specifier = literal(f(node, "moduleSpecifier"));
      if (specifier !== undefined)
        out.push({ specifier, typeOnly: typeOnlyDeclaration(node), line: line(node) });
    } else if (node.kind === SyntaxKind.ImportEqualsDeclaration) {
      const ref = f(node, "moduleReference");
      const specifier =
        ref.kind === SyntaxKind.ExternalModuleReference ? literal(f(ref, "expression")) : undefined;
      if (specifier !== undefined)
        out.push({ specifier, typeOnly: f<boolean>(node, "isTypeOnly") === true, line: line(node) });
    } else if (
      node.kind === SyntaxKind.CallExpression &&
      f(node, "expression").kind === SyntaxKind.ImportKeyword
    ) {
      const arg = f<readonly Node[]>(node, "arguments")[0];
      out.push({
        specifier: literal(arg) ?? `<computed: ${arg?.getText(sf) ?? ""}>`,
        typeOnly: false,
        line: line(node),
      });
    }
    node.forEachChild(visit);
  };
  sf.forEachChild(visit);
  return out;
}

/** Whether an import or export declaration brings in types only. */
function typeOnlyDeclaration(node: Node): boolean {
  if (node.kind === SyntaxKind.ExportDeclaration) return f<boolean>(node, "isTypeOnly") === true;
  const clause = f<Node | undefined>(node, "importClause");
  if (clause === undefined) return false; // import "x": run for its effects
  if (f<boolean>(clause, "isTypeOnly") === true) return true;
  if (f<Node | undefined>(clause, "name") !== undefined) return false;
  const bindings = f<Node | undefined>(clause, "namedBindings");
  if (bindings === undefined || bindings.kind !== SyntaxKind.NamedImports) return false;
  const elements = f<readonly Node[]>(bindings, "elements");
  return elements.length > 0 && elements.every((e) => f<boolean>(e, "isTypeOnly") === true);
}

/** The imports of files of an open project, by file (absolute path). */
export async function projectImports(
  project: Project,
  files: readonly string[],
): Promise<Map<string, TreeImport[]>> {
  const out = new Map<string, TreeImport[]>();
  for (const file of files) {
    const sf = (await project.program.getSourceFile(file)) as SourceFile | undefined;
    if (sf === undefined) throw new Error(`Cannot read ${file}: not part of the project`);
    out.set(file, importsOfTree(sf));
  }
  return out;
}

/** One use of a forbidden global in a core. */
export interface GlobalUse {
  /** The file, relative to the project's directory. */
  readonly file: string;
  readonly line: number;
  /** The expression, as written. */
  readonly code: string;
  /** What it is: clock, timer, randomness, process state, I/O… */
  readonly what: string;
}

/** Globals a core may not touch at all, with what they are. */
const FORBIDDEN_GLOBALS: Readonly<Record<string, string>> = {
  performance: "clock",
  process: "process state (env, exit, argv, hrtime, streams)",
  console: "I/O (the process's streams)",
  crypto: "randomness (Web Crypto)",
  Bun: "Bun runtime API (spawn, serve, file, sleep…)",
  fetch: "network I/O",
  setTimeout: "timer",
  setInterval: "timer",
  setImmediate: "timer",
  clearTimeout: "timer",
  clearInterval: "timer",
  queueMicrotask: "scheduling",
  require: "untracked import",
  eval: "code from strings",
  Function: "code from strings",
  globalThis: "the global object (any global through it)",
  window: "the global object",
  self: "the global object",
  global: "the global object",
};

/** node:crypto's random functions, forbidden under any name and on any object. */
const RANDOM_NAMES = /^(?:getRandomValues|randomBytes|randomUUID|randomInt|randomFill\w*|random)$/;

/** Date's members that read no clock. */
const DATE_PURE = new Set(["parse", "UTC"]);

interface Candidate {
  /** The identifier that names a global, or the random member's name. */
  readonly id: Node;
  /** The expression reported. */
  readonly at: Node;
  readonly what: string;
  /** Whether only a global of that name counts (false: the name is forbidden whatever it is). */
  readonly globalOnly: boolean;
}

const kindOf = (n: Node | undefined) => n?.kind;
const f = <T = Node>(n: Node, name: string) => (n as unknown as Record<string, T>)[name] as T;

/** Whether an identifier is a name being declared, a property name or part of a type. */
function notAValue(id: Node): boolean {
  const p = id.parent;
  if (p === undefined) return true;
  switch (p.kind) {
    case SyntaxKind.PropertyAccessExpression:
      return f(p, "name") === id;
    case SyntaxKind.PropertyAssignment:
    case SyntaxKind.PropertyDeclaration:
    case SyntaxKind.PropertySignature:
    case SyntaxKind.MethodDeclaration:
    case SyntaxKind.MethodSignature:
    case SyntaxKind.GetAccessor:
    case SyntaxKind.SetAccessor:
    case SyntaxKind.EnumMember:
    case SyntaxKind.BindingElement:
      return f(p, "name") === id || f(p, "propertyName") === id;
    case SyntaxKind.VariableDeclaration:
    case SyntaxKind.Parameter:
    case SyntaxKind.FunctionDeclaration:
    case SyntaxKind.ClassDeclaration:
    case SyntaxKind.InterfaceDeclaration:
    case SyntaxKind.TypeAliasDeclaration:
    case SyntaxKind.ImportSpecifier:
    case SyntaxKind.ImportClause:
    case SyntaxKind.NamespaceImport:
    case SyntaxKind.ExportSpecifier:
    case SyntaxKind.LabeledStatement:
      return f(p, "name") === id || f(p, "propertyName") === id;
    case SyntaxKind.TypeReference:
    case SyntaxKind.ExpressionWithTypeArguments:
    case SyntaxKind.TypeQuery:
    case SyntaxKind.QualifiedName:
      return true;
    default:
      return false;
  }
}

/** Whether `Date` at `id` is used only as `new Date(x…)`, `Date.parse(…)` or `Date.UTC(…)`. */
function pureDate(id: Node): boolean {
  const p = id.parent;
  if (kindOf(p) === SyntaxKind.NewExpression && f(p as Node, "expression") === id)
    return (f<readonly Node[] | undefined>(p as Node, "arguments")?.length ?? 0) > 0;
  if (kindOf(p) === SyntaxKind.PropertyAccessExpression && f(p as Node, "expression") === id)
    return DATE_PURE.has(f(p as Node, "name").getText(id.getSourceFile()));
  return false;
}

/** Whether `Math` at `id` is a member access other than `random`. */
function pureMath(id: Node, sf: SourceFile): boolean {
  const p = id.parent;
  if (kindOf(p) === SyntaxKind.PropertyAccessExpression && f(p as Node, "expression") === id)
    return f(p as Node, "name").getText(sf) !== "random";
  if (kindOf(p) === SyntaxKind.ElementAccessExpression && f(p as Node, "expression") === id) {
    const key = f(p as Node, "argumentExpression");
    return key.kind === SyntaxKind.StringLiteral && !RANDOM_NAMES.test(f<string>(key, "text"));
  }
  return false;
}

function candidates(sf: SourceFile): Candidate[] {
  const out: Candidate[] = [];
  const visit = (node: Node): void => {
    if (node.kind === SyntaxKind.MetaProperty && node.getText(sf) === "import.meta") {
      out.push({ id: node, at: node, what: "the module's location on disk", globalOnly: false });
    } else if (node.kind === SyntaxKind.Identifier) {
      const name = node.getText(sf);
      const p = node.parent;
      const memberName =
        (kindOf(p) === SyntaxKind.PropertyAccessExpression && f(p as Node, "name") === node) ||
        (kindOf(p) === SyntaxKind.BindingElement &&
          (f(p as Node, "propertyName") ?? f(p as Node, "name")) === node) ||
        (kindOf(p) === SyntaxKind.ImportSpecifier &&
          (f(p as Node, "propertyName") ?? f(p as Node, "name")) === node);
      if (RANDOM_NAMES.test(name) && name !== "random" && memberName) {
        out.push({ id: node, at: p as Node, what: "randomness", globalOnly: false });
      } else if (!notAValue(node)) {
        const at =
          kindOf(p) === SyntaxKind.PropertyAccessExpression ||
          kindOf(p) === SyntaxKind.ElementAccessExpression
            ? (p as Node)
            : node;
        if (name === "Date" && !pureDate(node)) out.push({ id: node, at, what: "clock", globalOnly: true });
        else if (name === "Math" && !pureMath(node, sf))
          out.push({ id: node, at, what: "randomness", globalOnly: true });
        else if (Object.hasOwn(FORBIDDEN_GLOBALS, name))
          out.push({ id: node, at, what: FORBIDDEN_GLOBALS[name] as string, globalOnly: true });
      }
    } else if (node.kind === SyntaxKind.ElementAccessExpression) {
      const key = f(node, "argumentExpression");
      if (
        key.kind === SyntaxKind.StringLiteral &&
        RANDOM_NAMES.test(f<string>(key, "text")) &&
        f<string>(key, "text") !== "random"
      )
        out.push({ id: key, at: node, what: "randomness", globalOnly: false });
    }
    node.forEachChild(visit);
  };
  sf.forEachChild(visit);
  return out;
}

/** Whether an identifier names something declared outside the project's own sources (a global). */
async function isGlobal(project: Project, dir: string, id: Node): Promise<boolean> {
  const sym = await project.checker.getSymbolAtLocation(id);
  if (sym === undefined) return true;
  const decl = await sym.valueDeclaration?.resolve(project);
  if (decl === undefined) return true;
  const file = decl.getSourceFile().fileName;
  return !file.startsWith(`${dir}/`) || file.includes("/node_modules/");
}

/**
 * Every use of a forbidden global (or random function) in the given files of an open project.
 * @param project an open project (tests/support/plainkeys.ts' openProject)
 * @param dir the project's directory: declarations outside it (or in its node_modules) are globals
 * @param files absolute paths of the core files
 */
export async function scanCoreGlobals(
  project: Project,
  dir: string,
  files: readonly string[],
): Promise<GlobalUse[]> {
  const found: GlobalUse[] = [];
  for (const file of files) {
    const sf = (await project.program.getSourceFile(file)) as SourceFile | undefined;
    if (sf === undefined) throw new Error(`Cannot scan ${file}: not part of the project`);
    for (const c of candidates(sf)) {
      if (c.globalOnly && !(await isGlobal(project, dir, c.id))) continue;
      found.push({
        file: file.startsWith(`${dir}/`) ? file.slice(dir.length + 1) : file,
        line: sf.text.slice(0, c.at.getStart(sf)).split("\n").length,
        code: c.at.getText(sf).replace(/\s+/g, " "),
        what: c.what,
      });
    }
  }
  return found;
}

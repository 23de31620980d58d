// The Talos machine-config patch that moves one control-plane machine to this release from the Go
// CCM installed the way its docs recommend (`cluster.externalCloudProvider.manifests: [<its deploy
// URL>]`), or from an earlier install of this project. Read from the machine's own config, it
// deletes what installs another CCM (the Go project's manifest URLs, an inline manifest running the
// Go image, this project's earlier inline manifest or release URL) and adds this release's patch,
// keeping every other entry of the lists it rewrites. Talos' strategic merge appends to a list of
// strings and cannot remove one entry, so the patch is two documents: the first deletes the lists it
// rewrites (`$patch: delete`), the second writes them back (what is kept, and for the lists this
// release's patch also writes, such as the Talos API roles, the union without duplicates) with this
// release's settings. Pure: reading the file and printing are lib/manifestscommand.ts's.

import { isMap, isSeq, parseAllDocuments, stringify } from "yaml";
import { PROGRAM_NAME } from "./help.ts";
import { APP_NAME, type ManifestSettings, RELEASE_MANIFEST_FILES } from "./manifests.ts";
import { renderTalosPatch, type TalosPatch, talosPatch } from "./talospatch.ts";

/** The Go project's repository path: a manifest URL under it installs the Go CCM. */
const GO_REPOSITORY = /\/siderolabs\/talos-cloud-controller-manager[/@]/i;

/** The Go CCM's image path, after any registry (ghcr.io, or a mirror of it). */
const GO_IMAGE = /(^|[\s/"'])siderolabs\/talos-cloud-controller-manager[:@]/;

/** Whether an image is the Go CCM's (`ghcr.io/siderolabs/talos-cloud-controller-manager:…`, or a mirror's path to it). */
export function isGoImage(image: string): boolean {
  return GO_IMAGE.test(image) || /(^|\/)siderolabs\/talos-cloud-controller-manager$/.test(image);
}

/** The resource type `talosctl get machineconfig -o yaml` prints, whose spec is the config as a string. */
const MACHINE_CONFIG_TYPE = "MachineConfigs.config.talos.dev";

/**
 * The lists of strings of a v1alpha1 document the migration reads, by name: the manifest lists it
 * removes CCMs from, and the lists this release's patch writes to (which Talos would append to).
 */
const LISTS = {
  cloudProviderManifests: ["cluster", "externalCloudProvider", "manifests"],
  extraManifests: ["cluster", "extraManifests"],
  allowedRoles: ["machine", "features", "kubernetesTalosAPIAccess", "allowedRoles"],
  allowedNamespaces: ["machine", "features", "kubernetesTalosAPIAccess", "allowedKubernetesNamespaces"],
} as const;

/** A list of {@link LISTS}. */
export type ListName = keyof typeof LISTS;

const MANIFEST_LISTS: readonly ListName[] = ["cloudProviderManifests", "extraManifests"];

/** A machine config this migration cannot read, with the reason. */
export class MachineConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "MachineConfigError";
  }
}

/** What a machine config's v1alpha1 document holds of the lists and inline manifests the migration rewrites. */
export interface MachineManifests {
  lists: Record<ListName, string[]>;
  /** `cluster.inlineManifests`, in order. */
  inlineManifests: { name: string; contents: string }[];
}

function parseDocs(text: string): unknown[] {
  const docs = parseAllDocuments(text, { uniqueKeys: true });
  if (!Array.isArray(docs)) return [];
  for (const d of docs) {
    const err = d.errors[0];
    if (err !== undefined) throw new MachineConfigError(`not YAML: ${err.message}`);
  }
  return docs.map((d) =>
    isMap(d.contents) || isSeq(d.contents) ? d.toJS({ maxAliasCount: 100 }) : d.contents,
  );
}

/** The value at `path` of plain nested objects, own keys only; undefined where the path ends. */
function at(obj: unknown, path: readonly string[]): unknown {
  let v: unknown = obj;
  for (const k of path) {
    if (typeof v !== "object" || v === null || Array.isArray(v) || !Object.hasOwn(v, k)) return undefined;
    v = Reflect.get(v, k);
  }
  return v;
}

/** The v1alpha1 document among parsed YAML documents: `version: v1alpha1` and no `kind`. */
function v1alpha1Of(docs: unknown[]): object | undefined {
  return docs.find(
    (d): d is object =>
      typeof d === "object" &&
      d !== null &&
      !Array.isArray(d) &&
      at(d, ["version"]) === "v1alpha1" &&
      !("kind" in d),
  );
}

function stringList(doc: object, name: ListName): string[] {
  const v = at(doc, LISTS[name]);
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v) || !v.every((e) => typeof e === "string")) {
    throw new MachineConfigError(`${LISTS[name].join(".")} is not a list of strings`);
  }
  return v;
}

function inlineList(doc: object): MachineManifests["inlineManifests"] {
  const v = at(doc, ["cluster", "inlineManifests"]);
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw new MachineConfigError("cluster.inlineManifests is not a list");
  return v.map((m, i) => {
    const name = at(m, ["name"]);
    const contents = at(m, ["contents"]) ?? "";
    if (typeof name !== "string" || typeof contents !== "string") {
      throw new MachineConfigError(`cluster.inlineManifests[${i}] has no name or its contents are not text`);
    }
    return { name, contents };
  });
}

/**
 * Reads what a machine config holds: the raw config (`talosctl get machineconfig -o
 * jsonpath='{.spec}'`, `talosctl gen config`'s controlplane.yaml) or the resource `talosctl get
 * machineconfig -o yaml` prints.
 * @throws {MachineConfigError} when the text is no YAML, holds no v1alpha1 document, or one of the
 * lists is not a list of strings.
 */
export function readMachineConfig(text: string): MachineManifests {
  let docs = parseDocs(text);
  if (docs.length === 1 && at(docs[0], ["metadata", "type"]) === MACHINE_CONFIG_TYPE) {
    const spec = at(docs[0], ["spec"]);
    if (typeof spec !== "string")
      throw new MachineConfigError(`the ${MACHINE_CONFIG_TYPE} resource's spec is not the config`);
    docs = parseDocs(spec);
  }
  const doc = v1alpha1Of(docs);
  if (doc === undefined)
    throw new MachineConfigError("no v1alpha1 document (`version: v1alpha1`): not a Talos machine config");
  const lists = {} as Record<ListName, string[]>;
  for (const name of Object.keys(LISTS) as ListName[]) lists[name] = stringList(doc, name);
  return { lists, inlineManifests: inlineList(doc) };
}

/** Why an entry is removed: the Go CCM, or an earlier install of this project. */
export type Replaced = "the Go CCM" | "this project";

/**
 * Whether a manifest URL installs a CCM this release replaces: a file of the Go project's repository
 * (raw.githubusercontent.com, github.com, a CDN mirror of it), or a release manifest of this project.
 */
export function replacedURL(url: string): Replaced | undefined {
  if (GO_REPOSITORY.test(url)) return "the Go CCM";
  const file = url.split(/[?#]/, 1)[0]?.split("/").pop() ?? "";
  return (Object.values(RELEASE_MANIFEST_FILES) as string[]).includes(file) ? "this project" : undefined;
}

/**
 * Whether an inline manifest installs a CCM this release's inline manifest replaces: this project's
 * earlier one (by its name), or one that runs the Go image and holds only the Go CCM's objects (each
 * named for it, as the Go manifests are).
 * @throws {MachineConfigError} when it runs the Go image beside objects of something else: deleting
 * it would delete them too.
 */
function replacedInline(m: MachineManifests["inlineManifests"][number], i: number): Replaced | undefined {
  if (m.name === APP_NAME) return "this project";
  if (!GO_IMAGE.test(m.contents)) return undefined;
  const others = parseDocs(m.contents)
    .map((d) => ({ kind: at(d, ["kind"]), name: at(d, ["metadata", "name"]) }))
    .filter((o) => o.kind !== undefined && !String(o.name ?? "").includes(APP_NAME));
  if (others.length > 0) {
    const what = others.map((o) => `${String(o.kind)} ${String(o.name ?? "")}`).join(", ");
    throw new MachineConfigError(
      `cluster.inlineManifests[${i}] (${m.name}) runs the Go CCM's image beside other objects (${what}): move them to an inline manifest of their own first`,
    );
  }
  return "the Go CCM";
}

/** One removed entry: where it was, what it was, and what it installed. */
export interface Removal {
  path: string;
  entry: string;
  installs: Replaced;
}

/** What the migration patch does to one machine config. */
export interface MigrationPlan {
  removed: Removal[];
  /** The lists deleted and written back, with what they hold after the patch. */
  rewritten: Partial<Record<ListName, string[]>>;
  /** Inline manifests deleted by name (this release's is added after). */
  deletedInline: string[];
  /** This release's patch, with the rewritten lists. */
  patch: TalosPatch;
}

/** Sets `value` at `path` of plain nested objects, making the objects on the way; `[]` removes the key. */
function setAt(obj: object, path: readonly string[], value: unknown): void {
  let o = obj as Record<string, unknown>;
  for (const k of path.slice(0, -1)) {
    if (typeof o[k] !== "object" || o[k] === null) o[k] = {};
    o = o[k] as Record<string, unknown>;
  }
  const last = path.at(-1) as string;
  if (Array.isArray(value) && value.length === 0) delete o[last];
  else o[last] = value;
}

/**
 * Decides what the migration removes, keeps and writes back (pure): manifest lists lose the CCM
 * entries (rewritten when they lose one), the lists this release's patch writes to are rewritten as
 * their union with the patch's entries (when the machine has any: Talos would append duplicates), and
 * the inline manifests of another CCM or of this project go.
 */
export function planMigration(s: ManifestSettings, installed: MachineManifests): MigrationPlan {
  const removed: Removal[] = [];
  const rewritten: MigrationPlan["rewritten"] = {};
  const patch = talosPatch(s);
  for (const name of Object.keys(LISTS) as ListName[]) {
    const list = installed.lists[name];
    if (MANIFEST_LISTS.includes(name)) {
      const kept = list.filter((url, i) => {
        const installs = replacedURL(url);
        if (installs !== undefined)
          removed.push({ path: `${LISTS[name].join(".")}[${i}]`, entry: url, installs });
        return installs === undefined;
      });
      if (kept.length !== list.length) rewritten[name] = kept;
    } else if (list.length > 0) {
      const ours = (at(patch, LISTS[name]) as string[] | undefined) ?? [];
      rewritten[name] = [...new Set([...list, ...ours])];
    }
  }
  for (const [name, list] of Object.entries(rewritten) as [ListName, string[]][])
    setAt(patch, LISTS[name], list);
  const deletedInline: string[] = [];
  installed.inlineManifests.forEach((m, i) => {
    const installs = replacedInline(m, i);
    if (installs === undefined) return;
    deletedInline.push(m.name);
    removed.push({ path: `cluster.inlineManifests[${i}]`, entry: m.name, installs });
  });
  return { removed, rewritten, deletedInline, patch };
}

/** The first document: Talos delete selectors for the rewritten lists and the replaced inline manifests. */
function deletions(plan: MigrationPlan): object | undefined {
  const doc = {};
  // A new object each time: a shared one would be written as a YAML alias, which Talos cannot decode.
  for (const name of Object.keys(plan.rewritten) as ListName[]) setAt(doc, LISTS[name], { $patch: "delete" });
  if (plan.deletedInline.length > 0) {
    setAt(
      doc,
      ["cluster", "inlineManifests"],
      plan.deletedInline.map((name) => ({ name, $patch: "delete" })),
    );
  }
  return Object.keys(doc).length === 0 ? undefined : doc;
}

/**
 * The migration patch for one machine: a document of delete selectors (when the config holds
 * anything to delete or rewrite), then this release's Talos patch with the rewritten lists. For
 * `talosctl patch machineconfig --nodes <that machine> --patch @FILE`; Talos applies the documents in
 * order.
 * @param source the machine config's file name, for the header
 */
export function renderMigrationPatch(s: ManifestSettings, plan: MigrationPlan, source: string): string {
  // What the config holds goes into comments quoted: a line break in it would end the comment.
  const lines = [
    `# ${PROGRAM_NAME} ${s.version}: Talos machine-config patch that installs this release on the machine`,
    `# whose config is ${JSON.stringify(source)}, made by \`${PROGRAM_NAME} manifests --machine-config\`. Apply`,
    "# it to that machine only: talosctl patch machineconfig --nodes <its IP> --patch @<this file>",
  ];
  for (const r of plan.removed) lines.push(`# removes ${r.path} (${r.installs}): ${JSON.stringify(r.entry)}`);
  const body = renderTalosPatch(s, plan.patch);
  const del = deletions(plan);
  if (del === undefined) return `${lines.join("\n")}\n${body}`;
  lines.push(
    "# The first document deletes the lists and inline manifests it rewrites; the second writes them back.",
  );
  return `${lines.join("\n")}\n${stringify(del, { lineWidth: 0 })}---\n${body}`;
}

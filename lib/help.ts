// The help text: the usage lines, and each command's `--help` with its implemented flags grouped as
// upstream groups them (with defaults), the subcommands, and the flags accepted only for
// compatibility, laid out like cobra's. Pure: the flags come from lib/flagtable.ts.

import { type FlagInfo, type Group, listFlags, type Subcommand } from "./flagtable.ts";

/** Name the help text and error messages use for this program. */
export const PROGRAM_NAME = "talos-cloud-controller-manager";

/** The one-line usage of each form of the command. */
export function usage(): string {
  return [
    "Usage:",
    `  ${PROGRAM_NAME} [run] [flags]`,
    `  ${PROGRAM_NAME} validate --cloud-config FILE [--metadata FILE] [-o json|yaml]`,
    `  ${PROGRAM_NAME} manifests [--image IMAGE] [--controllers LIST] [--cloud-config FILE] [--namespace NS] [--workload DaemonSet|Deployment] [--talos-patch | --machine-config FILE]`,
    `  ${PROGRAM_NAME} preflight [--kubeconfig FILE] [--namespace NS] [--machine-config FILE...]`,
    `  ${PROGRAM_NAME} help [run|validate|manifests|preflight] | version`,
  ].join("\n");
}

/** Breaks `text` at spaces into lines of at most `width` (a longer word stays whole), later lines indented. */
function wrap(text: string, width: number, indent: string): string {
  const lines: string[] = [];
  let line = "";
  for (const word of text.split(" ")) {
    if (line !== "" && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else line = line === "" ? word : `${line} ${word}`;
  }
  if (line !== "") lines.push(line);
  return lines.join(`\n${indent}`);
}

const GROUP_ORDER: readonly Group[] = [
  "Subcommand",
  "Generic",
  "Leader election",
  "Secure serving",
  "Node controller",
  "Node IPAM",
  "Logging",
];

/**
 * The `--help` text: usage, the implemented flags grouped as upstream groups them (with defaults), the
 * subcommands, and the names of the flags accepted only for compatibility.
 * @param topic which command's flags to describe
 * @example helpText("validate").startsWith("Kubernetes cloud controller manager for Talos Linux") // true
 */
export function helpText(topic: Subcommand = "run"): string {
  const flags = listFlags(topic);
  const out = [
    "Kubernetes cloud controller manager for Talos Linux: initializes nodes from Talos metadata,",
    "approves kubelet serving certificates, allocates pod CIDRs and removes dead nodes.",
    "",
    usage(),
    ...flagSections(
      topic,
      flags.filter((f) => f.implemented),
    ),
    "",
    "Subcommands:",
    "  run         Run the controllers (the default when no subcommand is given).",
    "  validate    Check a configuration file and, with --metadata, show what its rules produce.",
    "  manifests   Print the deployment manifests (RBAC, ConfigMap, DaemonSet).",
    "  preflight   Read a cluster (and machine configs) and say what switching from the Go CCM breaks or changes.",
    "  help        Show this help, or a subcommand's.",
    "  version     Print the version.",
  ];
  const accepted = flags.filter((f) => !f.implemented).map((f) => `--${f.name}`);
  if (accepted.length > 0) {
    out.push(
      "",
      "Accepted for compatibility with k8s.io/cloud-provider, with a warning and no effect:",
      `  ${wrap(accepted.join(", "), 106, "  ")}`,
    );
  }
  return `${out.join("\n")}\n`;
}

/** A flag's left column: shorthand, name and type. */
function flagLabel(f: FlagInfo): string {
  return `${f.shorthand === undefined ? "    " : `-${f.shorthand}, `}--${f.name}${f.type === "" ? "" : ` ${f.type}`}`;
}

/** The implemented flags, a titled section per group in {@link GROUP_ORDER}, each section led by a blank line. */
function flagSections(topic: Subcommand, implemented: readonly FlagInfo[]): string[] {
  const out: string[] = [];
  // Like cobra, but a very long flag name pushes only its own description to the next line.
  const column = Math.min(Math.max(...implemented.map((f) => flagLabel(f).length)) + 4, 48);
  const indent = " ".repeat(column + 2);
  for (const section of GROUP_ORDER) {
    const members = implemented.filter((f) => f.group === section);
    if (members.length === 0) continue;
    out.push(
      "",
      `${section === "Subcommand" ? `${topic[0]?.toUpperCase()}${topic.slice(1)}` : section} flags:`,
    );
    for (const f of members) {
      // A no-break space keeps "(default x)" on one line; wrap() only breaks at plain spaces.
      const text = f.shownDefault === undefined ? f.help : `${f.help} (default\u00a0${f.shownDefault})`;
      const label = flagLabel(f);
      const head = label.length < column ? label.padEnd(column) : `${label}\n${indent}`;
      out.push(`  ${head}${wrap(text, 108 - column, indent).replaceAll("\u00a0", " ")}`);
    }
  }
  return out;
}

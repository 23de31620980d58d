// The clouds' own CCMs the "beside" tests run next to this one (tests/e2e/beside-*.test.ts): their
// binaries, built by tests/support/cloudccm-bins.sh, and the RBAC objects their release archives
// (pinned in tests/support/pins.ts, found and verified by tests/support/archives.ts) ship, so each
// runs as its own identity with the permissions it documents.

import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import { archiveSources, extractArchive } from "./archives.ts";
import { ARCHIVE_PINS } from "./pins.ts";

const ROOT = join(import.meta.dir, "..", "..");

/** A Kubernetes object from a release manifest, as far as the tests read it. */
export interface ManifestObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string };
}

/** The clouds' CCMs: their binary's variable, their pinned archive and its RBAC manifest's path in it. */
export const CLOUD_CCMS = {
  exoscale: {
    env: "EXOSCALE_CCM",
    name: "Exoscale CCM",
    pin: ARCHIVE_PINS["exoscale-ccm"],
    rbac: "docs/examples/cloud-controller-manager-rbac.yml",
  },
  oxide: {
    env: "OXIDE_CCM",
    name: "Oxide CCM",
    pin: ARCHIVE_PINS["oxide-ccm"],
    rbac: "manifests/oxide-cloud-controller-manager.yaml",
  },
} as const;

/** A cloud whose CCM the beside tests run. */
export type Cloud = keyof typeof CLOUD_CCMS;

/** The cloud's CCM binary (from its env variable), or a loud failure naming how to get it. */
export function cloudCcmBinary(cloud: Cloud): string {
  const { env, name } = CLOUD_CCMS[cloud];
  const bin = process.env[env] ?? "";
  if (!bin || !existsSync(bin))
    throw new Error(
      `${env} not found${bin ? ` (${bin})` : ""}: run the suite with \`npm test\` (tests/support/cloudccm-bins.sh ` +
        `builds the ${name} from its pinned archive, ${CLOUD_CCMS[cloud].pin.url}), or set ${env} to its binary` +
        (process.env[`${env}_ERROR`] ? `. npm test could not build it: ${process.env[`${env}_ERROR`]}` : ""),
    );
  return bin;
}

/**
 * The ServiceAccounts, ClusterRoles and bindings of the cloud's release manifest, read from its
 * pinned archive once its tree is verified (tests/support/archives.ts: the cache, SHARED_FIXTURES or
 * ../shared/fixtures, or the upstream URL).
 *
 * @throws ArchiveError naming the archive, its URL and how to provide it
 */
export async function cloudCcmRbac(cloud: Cloud): Promise<ManifestObject[]> {
  const { pin, rbac } = CLOUD_CCMS[cloud];
  const dest = mkdtempSync(join(tmpdir(), "talos-ccm-cloudccm-"));
  let text: string;
  try {
    const { root } = await extractArchive(pin, archiveSources(process.env, ROOT), dest);
    text = readFileSync(join(root, rbac), "utf8");
  } finally {
    rmSync(dest, { recursive: true, force: true });
  }
  return parseAllDocuments(text)
    .map((d) => d.toJS() as ManifestObject | null)
    .filter((o): o is ManifestObject =>
      ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"].includes(o?.kind ?? ""),
    );
}

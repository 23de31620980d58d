// The clouds' own CCMs the "beside" tests run next to this one (tests/e2e/beside-*.test.ts): their
// binaries, built by tests/support/cloudccm-bins.sh, and the RBAC objects their release archives in
// the shared fixtures ship, so each runs as its own identity with the permissions it documents.

import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";

const ROOT = join(import.meta.dir, "..", "..");

/** A Kubernetes object from a release manifest, as far as the tests read it. */
export interface ManifestObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string };
}

/** The release archives of the clouds' CCMs, as the shared fixtures hold them. */
export const CLOUD_CCMS = {
  exoscale: {
    env: "EXOSCALE_CCM",
    name: "Exoscale CCM",
    archive: "exoscale-ccm/exoscale-cloud-controller-manager-0.34.0.tar.gz",
    rbac: "exoscale-cloud-controller-manager-0.34.0/docs/examples/cloud-controller-manager-rbac.yml",
  },
  oxide: {
    env: "OXIDE_CCM",
    name: "Oxide CCM",
    archive: "oxide-ccm/oxide-cloud-controller-manager-0.7.1.tar.gz",
    rbac: "oxide-cloud-controller-manager-0.7.1/manifests/oxide-cloud-controller-manager.yaml",
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
        `builds the ${name} from the shared fixtures), or set ${env} to its binary`,
    );
  return bin;
}

/**
 * The ServiceAccounts, ClusterRoles and bindings of the cloud's release manifest, read from its
 * archive in the shared fixtures (../shared/fixtures beside the repository, or SHARED_FIXTURES).
 */
export function cloudCcmRbac(cloud: Cloud): ManifestObject[] {
  const { archive, rbac, name } = CLOUD_CCMS[cloud];
  const dir = [
    process.env.SHARED_FIXTURES,
    join(ROOT, "..", "shared", "fixtures"),
    "/work/shared/fixtures",
  ].find((d) => d && existsSync(d));
  const path = join(dir ?? "", archive);
  if (!dir || !existsSync(path))
    throw new Error(
      `Cannot read the ${name}'s RBAC: ${path} is missing (shared fixtures, or SHARED_FIXTURES)`,
    );
  const r = spawnSync("tar", ["-xzOf", path, rbac]);
  if (r.status !== 0) throw new Error(`Cannot extract the ${name}'s manifest: ${r.stderr}`);
  return parseAllDocuments(r.stdout.toString())
    .map((d) => d.toJS() as ManifestObject | null)
    .filter((o): o is ManifestObject =>
      ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"].includes(o?.kind ?? ""),
    );
}

// Every third-party archive the test bed builds that go.sum does not pin: one row each, by name,
// version, upstream URL and a hash of its extracted tree. The Go modules the test bed builds
// (kube-apiserver, etcd, helm, Talos, actionlint, ...) are pinned by version in the build scripts and
// by their go.sum; the two cloud CCMs below are not served by the Go module proxy, so their release
// archives are the way in (tests/support/archives.ts finds, downloads and verifies them).
//
// `tree` is Go's dirhash "h1:" (golang.org/x/mod/sumdb/dirhash Hash1) of the archive's tree with its
// one top-level folder stripped: base64 of the SHA-256 of the lines "<sha256 hex>  <path>\n", one per
// regular file, sorted by path, paths relative to that folder. Stripped because the folder's name is
// the packer's choice (the forge's archive names it <repo>-<version without v>; a mirror may not),
// and the bytes of the archive are not pinned because a mirror's archive need not equal the forge's:
// the same tag gives the same tree, so the same hash, from either. Directories, file modes and
// timestamps are not hashed; a symlink or any other non-regular file fails verification. Neither tree
// has an export-ignore or export-subst attribute, so the forge's archive (`git archive` of the tag)
// holds the same files: repacked with `git archive` under another folder name, the mirror's trees
// hash to the values below.
//
// To move a version: change `version`, `url` and `file`, get the new archive, and put the `tree`
// printed by `bun tests/support/archives.ts hash <archive>` here.

/** One pinned third-party archive. */
export interface ArchivePin {
  /** Short name: the mirror's folder and the key the build scripts use. */
  name: string;
  /** What it is, for messages. */
  title: string;
  /** The upstream project. */
  project: string;
  /** Its licence (SPDX). */
  licence: string;
  /** The upstream tag. */
  version: string;
  /** The upstream release archive at that tag. */
  url: string;
  /** The archive's file name in the mirror folder and in the cache. */
  file: string;
  /** Where it sits in the mirror folder (SHARED_FIXTURES), relative to it. */
  mirrorPath: string;
  /** Go dirhash h1 of the extracted tree, top-level folder stripped. */
  tree: string;
}

/** The pinned archives, by name. */
export const ARCHIVE_PINS = {
  "exoscale-ccm": {
    name: "exoscale-ccm",
    title: "Exoscale CCM",
    project: "github.com/exoscale/exoscale-cloud-controller-manager",
    licence: "Apache-2.0",
    version: "v0.34.0",
    url: "https://github.com/exoscale/exoscale-cloud-controller-manager/archive/refs/tags/v0.34.0.tar.gz",
    file: "exoscale-cloud-controller-manager-0.34.0.tar.gz",
    mirrorPath: "exoscale-ccm/exoscale-cloud-controller-manager-0.34.0.tar.gz",
    tree: "h1:9kUpimIpGOb+i34zf6NHWafxdxIq1jf5QTqv8u5K+/8=",
  },
  "oxide-ccm": {
    name: "oxide-ccm",
    title: "Oxide CCM",
    project: "github.com/oxidecomputer/oxide-cloud-controller-manager",
    licence: "MPL-2.0",
    version: "v0.7.1",
    url: "https://github.com/oxidecomputer/oxide-cloud-controller-manager/archive/refs/tags/v0.7.1.tar.gz",
    file: "oxide-cloud-controller-manager-0.7.1.tar.gz",
    mirrorPath: "oxide-ccm/oxide-cloud-controller-manager-0.7.1.tar.gz",
    tree: "h1:mgUgSYXDKh0araNd3met0GGLTKs6q/7V00Zm7blZbAc=",
  },
} as const satisfies Record<string, ArchivePin>;

/** The name of a pinned archive. */
export type ArchiveName = keyof typeof ARCHIVE_PINS;

/**
 * The pin of a named archive.
 *
 * @param name a key of ARCHIVE_PINS
 * @returns its pin
 * @throws Error when no archive of that name is pinned
 */
export function archivePin(name: string): ArchivePin {
  const pin = (ARCHIVE_PINS as Record<string, ArchivePin>)[name];
  if (!pin)
    throw new Error(`Cannot find archive ${name}: pinned are ${Object.keys(ARCHIVE_PINS).join(", ")}`);
  return pin;
}

// Build identity: the version and git commit that build.ts embeds with --define, and the
// k8s.io/apimachinery version.Info they make, which `--version=raw` prints and
// `kubernetes_build_info` labels. Source runs (bun test, bun main.ts) report "dev" and "unknown".

import { quote } from "./templatestrconv.ts";

declare const BUILD_VERSION: string | undefined;
declare const BUILD_COMMIT: string | undefined;

/** The release version, e.g. "0.1.0". */
export const version: string = typeof BUILD_VERSION === "string" ? BUILD_VERSION : "dev";
/** The git commit the binary was built from. */
export const commit: string = typeof BUILD_COMMIT === "string" ? BUILD_COMMIT : "unknown";

/**
 * k8s.io/apimachinery's version.Info of this binary. It is built by Bun, not Go: `compiler` is "bun"
 * and `goVersion` is empty; no build date or tree state is recorded.
 */
export interface VersionInfo {
  major: string;
  minor: string;
  gitVersion: string;
  gitCommit: string;
  gitTreeState: string;
  buildDate: string;
  goVersion: string;
  compiler: string;
  platform: string;
}

/**
 * The version.Info of `release` and `gitCommit` on this platform: major and minor from the release,
 * `v` before a release number (Kubernetes' gitVersion style).
 * @example versionInfo("0.1.0", "abc").gitVersion // "v0.1.0"
 */
export function versionInfo(release = version, gitCommit = commit): VersionInfo {
  const m = /^(\d+)\.(\d+)\./.exec(release);
  const arch = process.arch === "x64" ? "amd64" : process.arch;
  return {
    major: m?.[1] ?? "",
    minor: m?.[2] ?? "",
    gitVersion: m ? `v${release}` : release,
    gitCommit,
    gitTreeState: "",
    buildDate: "",
    goVersion: "",
    compiler: "bun",
    platform: `${process.platform}/${arch}`,
  };
}

/** `--version=raw`: Go's `%#v` of version.Info, as upstream's verflag prints it. */
export function formatVersionRaw(info: VersionInfo): string {
  const q = (s: string) => quote(s, '"', false);
  return (
    `version.Info{Major:${q(info.major)}, Minor:${q(info.minor)}, EmulationMajor:"", EmulationMinor:"", ` +
    `MinCompatibilityMajor:"", MinCompatibilityMinor:"", GitVersion:${q(info.gitVersion)}, ` +
    `GitCommit:${q(info.gitCommit)}, GitTreeState:${q(info.gitTreeState)}, BuildDate:${q(info.buildDate)}, ` +
    `GoVersion:${q(info.goVersion)}, Compiler:${q(info.compiler)}, Platform:${q(info.platform)}}`
  );
}

// Build identity: the version and git commit that build.ts embeds with --define. Source runs
// (bun test, bun main.ts) report "dev" and "unknown".

declare const BUILD_VERSION: string | undefined;
declare const BUILD_COMMIT: string | undefined;

/** The release version, e.g. "0.1.0". */
export const version: string = typeof BUILD_VERSION === "string" ? BUILD_VERSION : "dev";
/** The git commit the binary was built from. */
export const commit: string = typeof BUILD_COMMIT === "string" ? BUILD_COMMIT : "unknown";

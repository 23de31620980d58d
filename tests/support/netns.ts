// Running a process in another network namespace, e.g. the Talos simulator's (TalosSim.netns,
// tests/support/talossim.ts): its command line prefixed with nsenter (util-linux), which enters the
// namespace and execs the command (the process keeps nsenter's pid: no fork). A namespace a non-root
// user made with a user namespace of its own (the simulator run without root) is entered through that
// user namespace, keeping the caller's credentials (`--preserve-credentials`: nsenter would otherwise
// call setgroups, which an unprivileged user namespace denies); root enters the network namespace
// alone.
//
// @example
// spawn(nsenterCommand(sim.netns, ["curl", "http://127.0.0.1:8080/"]))

import { readlinkSync } from "node:fs";

/** The path of nsenter, or an error saying where it comes from. */
function nsenter(): string {
  const path = Bun.which("nsenter");
  if (!path)
    throw new Error(
      "nsenter not found on PATH: running a process in the Talos simulator's network namespace needs it (util-linux)",
    );
  return path;
}

/** The namespace `link` points to (e.g. "user:[4026531837]"), or undefined when it cannot be read. */
function nsOf(link: string): string | undefined {
  try {
    return readlinkSync(link);
  } catch {
    return undefined;
  }
}

/**
 * The user namespace to enter with `netns` (`/proc/<pid>/ns/net`): the process' own when it differs
 * from ours and we are not root; undefined otherwise (or for a path of another form, e.g.
 * /run/netns/NAME).
 */
function userNamespaceFor(netns: string): string | undefined {
  const pid = netns.match(/^\/proc\/(\d+)\/ns\/net$/)?.[1];
  if (pid === undefined || process.geteuid?.() === 0) return undefined;
  const user = `/proc/${pid}/ns/user`;
  const theirs = nsOf(user);
  return theirs !== undefined && theirs !== nsOf("/proc/self/ns/user") ? user : undefined;
}

/**
 * `argv` run in the network namespace at `netns` (e.g. `/proc/<pid>/ns/net`): `nsenter --net=<netns>
 * [--user=… --preserve-credentials] -- argv…`.
 * @throws when nsenter is not on PATH
 */
export function nsenterCommand(netns: string, argv: readonly string[]): string[] {
  const user = userNamespaceFor(netns);
  return [
    nsenter(),
    ...(user === undefined ? [] : [`--user=${user}`, "--preserve-credentials"]),
    `--net=${netns}`,
    "--",
    ...argv,
  ];
}

import { describe, expect, test } from "bun:test";
import { KubeConfigError, type KubeconfigFiles, parseKubeconfig } from "../../lib/kubeconfig.ts";

/** Files held in memory, resolved against /etc/kube; records what was read. */
function memoryFiles(content: Record<string, string>): KubeconfigFiles & { reads: string[] } {
  const reads: string[] = [];
  return {
    reads,
    resolve: (file) => (file.startsWith("/") ? file : `/etc/kube/${file}`),
    read: (path) => {
      reads.push(path);
      const text = content[path];
      if (text === undefined) throw new Error(`ENOENT: no such file or directory, open '${path}'`);
      return text;
    },
  };
}

const doc = (user: string, cluster = "server: https://k:6443") =>
  [
    "current-context: c",
    "contexts: [{ name: c, context: { cluster: k, user: u } }, { name: other, context: { cluster: k } }]",
    `clusters: [{ name: k, cluster: { ${cluster} } }]`,
    `users: [{ name: u, user: { ${user} } }]`,
  ].join("\n");

describe("parseKubeconfig()", () => {
  test("parseKubeconfig() reads the files a kubeconfig names through `files`, relative paths against its directory", () => {
    const files = memoryFiles({ "/etc/kube/ca.crt": "CA", "/pki/c.crt": "CRT", "/etc/kube/c.key": "KEY" });
    const conn = parseKubeconfig(
      doc(
        "client-certificate: /pki/c.crt, client-key: c.key, tokenFile: tok",
        "server: https://k:6443, certificate-authority: ca.crt, tls-server-name: api",
      ),
      "/etc/kube/config",
      files,
    );
    expect(conn).toEqual({
      server: "https://k:6443",
      ca: "CA",
      serverName: "api",
      cert: "CRT",
      key: "KEY",
      auth: { kind: "tokenFile", path: "/etc/kube/tok" },
    });
    // The token file is read per request by the client, not here.
    expect(files.reads).toEqual(["/etc/kube/ca.crt", "/pki/c.crt", "/etc/kube/c.key"]);
  });

  test.each([
    ["token: t, username: a, password: b", { kind: "token", token: "t" }],
    [
      "exec: { command: x }, username: a, password: b",
      { kind: "plugin", kubeconfigPath: "/k", context: "c" },
    ],
    ["auth-provider: { name: oidc }", { kind: "plugin", kubeconfigPath: "/k", context: "c" }],
    ["username: a, password: b", { kind: "basic", username: "a", password: "b" }],
    ["username: a", { kind: "none" }],
  ])("parseKubeconfig() user { %s } authenticates as %p", (user, auth) => {
    expect(parseKubeconfig(doc(user), "/k", memoryFiles({})).auth).toEqual(auth as never);
  });

  test.each([
    [
      "client-certificate-data: Q1JU",
      "",
      "Cannot load kubeconfig /k: user needs both client-certificate and client-key",
    ],
    [
      "client-key: missing.key, client-certificate-data: Q1JU",
      "",
      "Cannot read client key /etc/kube/missing.key: ENOENT",
    ],
    ["token: t", "server: https://k:6443, certificate-authority: /nope", "Cannot read CA /nope: ENOENT"],
    ["token: t", "insecure-skip-tls-verify: true", 'Cannot load kubeconfig /k: cluster "k" has no server'],
  ])("parseKubeconfig() refuses user { %s } cluster { %s }: %p", (user, cluster, message) => {
    expect(() => parseKubeconfig(doc(user, cluster || undefined), "/k", memoryFiles({}))).toThrow(message);
  });

  test("parseKubeconfig() uses the named context, and names a missing one", () => {
    expect(parseKubeconfig(doc("token: t"), "/k", memoryFiles({}), "other").auth).toEqual({ kind: "none" });
    expect(() => parseKubeconfig(doc("token: t"), "/k", memoryFiles({}), "nope")).toThrow(
      new KubeConfigError('Cannot load kubeconfig /k: context "nope" not found'),
    );
    expect(() => parseKubeconfig("apiVersion: v1", "/k", memoryFiles({}))).toThrow("no current-context");
  });
});

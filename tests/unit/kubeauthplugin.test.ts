import { describe, expect, test } from "bun:test";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadCredentialPlugin } from "../../lib/kubeauthplugin.ts";

describe("loadCredentialPlugin()", () => {
  test("loadCredentialPlugin() runs a kubeconfig user's exec plugin and adds its token to the headers", async () => {
    const dir = mkdtempSync(join(tmpdir(), "kubeauthplugin-test-"));
    try {
      const plugin = join(dir, "plugin.sh");
      const credential = {
        apiVersion: "client.authentication.k8s.io/v1",
        kind: "ExecCredential",
        status: { token: "from-the-plugin" },
      };
      writeFileSync(plugin, `#!/bin/sh\necho '${JSON.stringify(credential)}'\n`);
      chmodSync(plugin, 0o755);
      const kubeconfig = join(dir, "kubeconfig");
      writeFileSync(
        kubeconfig,
        [
          "apiVersion: v1",
          "current-context: other",
          "contexts: [{ name: c, context: { cluster: k, user: u } }, { name: other, context: { cluster: k } }]",
          "clusters: [{ name: k, cluster: { server: https://127.0.0.1:1 } }]",
          "users:",
          "- name: u",
          "  user:",
          "    exec: { apiVersion: client.authentication.k8s.io/v1, command: " +
            plugin +
            ", interactiveMode: Never }",
        ].join("\n"),
      );
      const addCredentials = await loadCredentialPlugin(kubeconfig, "c");
      const headers: Record<string, string> = { accept: "application/json" };
      await addCredentials(headers);
      expect(headers).toEqual({ accept: "application/json", authorization: "Bearer from-the-plugin" });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

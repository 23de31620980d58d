// The exec and auth-provider credential plugins of a kubeconfig user: @kubernetes/client-node is
// loaded (about 22 MB of resident memory) only for a kubeconfig that uses one, and runs the plugin
// to get the credentials each request carries. Its HTTP layer is not used (lib/kube.ts).

/** Adds a credential plugin's current credentials to request headers (lower-cased names). */
export type CredentialPlugin = (headers: Record<string, string>) => Promise<void>;

/**
 * Loads @kubernetes/client-node for a kubeconfig user with an `exec` or `auth-provider` plugin and
 * returns a function that adds the plugin's credentials to request headers.
 * @param path the kubeconfig file.
 * @param context the context whose user has the plugin.
 */
export async function loadCredentialPlugin(path: string, context: string): Promise<CredentialPlugin> {
  const { KubeConfig } = await import("@kubernetes/client-node");
  const kc = new KubeConfig();
  kc.loadFromFile(path);
  kc.setCurrentContext(context);
  return async (headers) => {
    const opts: { headers?: Record<string, string> } = {};
    await kc.applyToHTTPSOptions(opts as never);
    for (const [k, v] of Object.entries(opts.headers ?? {})) headers[k.toLowerCase()] = String(v);
  };
}

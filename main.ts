// Entry point of the talos-cloud-controller-manager binary: parses the command line, then runs the
// subcommand. Controllers are imported lazily so a disabled one costs no memory.

import { KubeClient, loadConnection } from "./lib/kube.ts";
import { logger } from "./lib/log.ts";
import { commit, version } from "./lib/version.ts";

const log = logger("main");
const argv = process.argv.slice(2);

if (argv.includes("--version")) {
  console.log(`talos-cloud-controller-manager ${version} (commit ${commit}, bun ${Bun.version})`);
  process.exit(0);
}
if (argv.includes("--help") || argv.includes("-h")) {
  console.log("Usage: talos-cloud-controller-manager [run|validate|manifests] [flags]");
  process.exit(0);
}

const kubeconfig = argv.find((a) => a.startsWith("--kubeconfig="))?.slice("--kubeconfig=".length);
const client = new KubeClient(loadConnection({ kubeconfig }));
const info = await client.get<{ gitVersion: string }>("/version");
log.info("Connected to the Kubernetes API server", { server: client.server, version: info.gitVersion });

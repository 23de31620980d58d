// The node-csr-approval controller. PLACEHOLDER: being written now; refuses to start until it lands.

import type { ControllerContext } from "./manager.ts";

/** Starts the node-csr-approval controller. */
export async function startCsrApprover(_ctx: ControllerContext, _signal: AbortSignal): Promise<void> {
  throw new Error("Cannot start node-csr-approval: not implemented in this build yet");
}

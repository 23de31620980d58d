// The CSR the unit tests of lib/csr.ts decide on: a pending kubelet-serving CSR as the controller
// reads it from the API (lib/csr.ts CsrInput), filed by worker-a's kubelet.

import type { CsrInput } from "../../lib/csr.ts";
import { KUBELET_SERVING_SIGNER } from "../../lib/wellknown.ts";

/** worker-a's kubelet, the requester unless a test says otherwise. */
export const USER_A = "system:node:worker-a";

/** `text` in base64, as a CSR object carries its request. */
export const b64 = (text: string | Uint8Array): string => Buffer.from(text).toString("base64");

/**
 * A pending CSR for the kubelet-serving signer with `request` (base64 of a PEM, as the API object
 * carries it), filed by worker-a's kubelet in group system:nodes for digital signature and server
 * auth; `over` changes any field.
 * @example servingCsr(b64(pem), { username: "system:node:worker-b" })
 */
export function servingCsr(request: string, over: Partial<CsrInput> = {}): CsrInput {
  return {
    name: "csr-1",
    signerName: KUBELET_SERVING_SIGNER,
    username: USER_A,
    groups: ["system:nodes"],
    usages: ["digital signature", "server auth"],
    request,
    conditions: [],
    ...over,
  };
}

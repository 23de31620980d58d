// CSR-only mode's Service-name rule: which lookups a DNS SAN needs (lib/csrservices.ts), what the
// answers make of each form (a Service's name, name.namespace, pod.service, pod.service.namespace),
// the API requests that read them and their failures, and decide() with the answers: a name that
// reaches a Service through a Pod's search path is denied as ServiceName, the node's own hostname
// that is no Service is approved, and Talos mode does not read them.

import { beforeAll, describe, expect, test } from "bun:test";
import { decide, type NodeInput, type TalosFacts } from "../../lib/csr.ts";
import {
  lookUpServiceNames,
  lookupCount,
  ServiceNameAnswers,
  serviceQuestions,
} from "../../lib/csrservices.ts";
import { KubeError, type RequestOptions } from "../../lib/kubeapi.ts";
import { b64, servingCsr, USER_A } from "../support/csrinput.ts";
import { createCSR } from "../support/pki.ts";

/** The cluster: namespaces default, kube-system, vault; Services vault/vault, kube-system/kube-dns. */
const answers = new ServiceNameAnswers(
  new Map([
    ["vault", true],
    ["kube-system", true],
    ["lan", false],
    ["example", false],
    ["vault-internal", false],
  ]),
  new Map<string, string | null>([
    ["vault", "vault/vault"],
    ["kube-dns", "kube-system/kube-dns"],
    ["worker-a", null],
    ["lan", null],
    ["vault-internal", "vault/vault-internal"],
  ]),
);

describe("serviceQuestions()", () => {
  test("serviceQuestions() asks per form, each namespace and Service name once", () => {
    const q = serviceQuestions(["vault", "Vault.", "vault.vault", "a.b.c", "a.b.c.d", "worker-a.lan"]);
    expect([...q.services].sort()).toEqual(["lan", "vault"]);
    expect([...q.namespaces].sort()).toEqual(["c", "lan", "vault"]);
    expect(lookupCount(q)).toBe(5);
    expect(lookupCount(serviceQuestions(["a.b.c.d", "w.x.y.z.example"]))).toBe(0);
  });
});

describe("ServiceNameAnswers.reach()", () => {
  test.each([
    ["vault", "resolves to Service vault/vault through a Pod's search path"],
    ["kube-dns", "resolves to Service kube-system/kube-dns through a Pod's search path"],
    [
      "vault.vault",
      "resolves to Service vault/vault through a Pod's search path (namespace vault exists: such a Service can be created there at any time)",
    ],
    [
      "anything.kube-system",
      "resolves to Service kube-system/anything through a Pod's search path (namespace kube-system exists",
    ],
    ["vault-0.vault-internal", "resolves to Pod vault-0 behind Service vault/vault-internal"],
    ["vault-0.vault-internal.vault", "resolves to Pod vault-0 of Service vault/vault-internal"],
    ["unasked", "was not checked against the cluster's Services"],
    ["x.unasked", "was not checked against the cluster's namespaces"],
  ])("reach(%p) says it reaches a Service", (name, says) => {
    expect(answers.reach(name)).toContain(says);
  });

  test.each(["worker-a", "worker-a.lan", "a.b.example", "w.x.y.z", "worker-a.lan.example.com"])(
    "reach(%p) reaches nothing",
    (name) => {
      expect(answers.reach(name)).toBeUndefined();
    },
  );
});

/** An API server with namespaces and Services, recording each request; `fail` answers that status. */
function fakeApi(fail?: number) {
  const gets: string[] = [];
  return {
    gets,
    async get<T>(path: string, opts: RequestOptions = {}): Promise<T> {
      gets.push(`${path} ${JSON.stringify(opts.query ?? {})}`);
      if (fail) throw new KubeError(fail, "InternalError", "etcd is down");
      if (path === "/api/v1/namespaces/vault") return { metadata: {} } as T;
      if (path.startsWith("/api/v1/namespaces/")) throw new KubeError(404, "NotFound", "not found");
      const items =
        opts.query?.fieldSelector === "metadata.name=vault"
          ? [{ metadata: { name: "vault", namespace: "vault" } }]
          : [];
      return { items } as T;
    },
  };
}

describe("lookUpServiceNames()", () => {
  test("lookUpServiceNames() GETs each namespace and lists Services by name, one at most", async () => {
    const api = fakeApi();
    const got = await lookUpServiceNames(api, serviceQuestions(["vault", "x.vault", "worker-a.lan"]));
    expect(api.gets.sort()).toEqual([
      "/api/v1/namespaces/lan {}",
      "/api/v1/namespaces/vault {}",
      '/api/v1/services {"fieldSelector":"metadata.name=lan","limit":1}',
      '/api/v1/services {"fieldSelector":"metadata.name=vault","limit":1}',
    ]);
    expect(got.reach("vault")).toContain("Service vault/vault");
    expect(got.reach("x.vault")).toContain("Service vault/x");
    expect(got.reach("worker-a.lan")).toBeUndefined();
  });

  test("lookUpServiceNames() throws on any other answer: the CSR is not decided", async () => {
    await expect(lookUpServiceNames(fakeApi(500), serviceQuestions(["vault"]))).rejects.toThrow(
      "Cannot look up Services named vault: etcd is down",
    );
    await expect(lookUpServiceNames(fakeApi(403), serviceQuestions(["a.b"]))).rejects.toThrow(
      /Cannot look up (namespace b|Services named b)/,
    );
  });
});

describe("decide() in CSR-only mode with the cluster's Service names", () => {
  const node = (names: string[]): NodeInput => ({
    name: "worker-a",
    addresses: [
      { type: "InternalIP", address: "10.0.0.1" },
      ...names.map((address) => ({ type: "InternalDNS", address })),
    ],
  });
  const pems = new Map<string, string>();
  const NAMES = ["vault", "vault.vault", "kube-dns.kube-system", "worker-a.lan", "VAULT."];
  beforeAll(async () => {
    for (const n of NAMES) {
      pems.set(
        n,
        (await createCSR({ cn: USER_A, o: ["system:nodes"], dns: ["worker-a", n], ips: ["10.0.0.1"] })).csr,
      );
    }
    pems.set(
      "",
      (await createCSR({ cn: USER_A, o: ["system:nodes"], dns: ["worker-a"], ips: ["10.0.0.1"] })).csr,
    );
  });

  test.each([
    ["vault", "Service vault/vault"],
    ["VAULT.", "Service vault/vault"],
    ["vault.vault", "Service vault/vault"],
    ["kube-dns.kube-system", "Service kube-system/kube-dns"],
  ])("a DNS SAN %p is denied as ServiceName", (name, service) => {
    const d = decide(
      servingCsr(b64(pems.get(name) as string)),
      node([name]),
      undefined,
      [],
      undefined,
      answers,
    );
    expect(d).toMatchObject({ action: "deny", reason: "ServiceName" });
    expect((d as { message: string }).message).toContain(
      `DNS SAN ${JSON.stringify(name)} resolves to ${service} through a Pod's search path`,
    );
  });

  test("the node's own hostname and a DNS name that reach no Service are approved", () => {
    for (const [pem, names] of [
      [pems.get(""), []],
      [pems.get("worker-a.lan"), ["worker-a.lan"]],
    ] as const) {
      expect(
        decide(servingCsr(b64(pem as string)), node([...names]), undefined, [], undefined, answers),
      ).toMatchObject({
        action: "approve",
      });
    }
  });

  test("the node's own name is judged too: a node named like a Service gets no certificate for it", () => {
    const named = new ServiceNameAnswers(new Map(), new Map([["worker-a", "default/worker-a"]]));
    const d = decide(servingCsr(b64(pems.get("") as string)), node([]), undefined, [], undefined, named);
    expect(d).toMatchObject({ action: "deny", reason: "ServiceName" });
  });

  test("with Talos the answers are not read: Talos must know the name", () => {
    const talos: TalosFacts = {
      nodeIP: "10.0.0.1",
      nodename: "worker-a",
      addresses: ["10.0.0.1/24"],
      dnsNames: ["vault"],
      sharedAddresses: new Map(),
      excludedSubnets: [],
    };
    const d = decide(
      servingCsr(b64(pems.get("vault") as string)),
      node(["vault"]),
      talos,
      [],
      undefined,
      answers,
    );
    expect(d.action).toBe("approve");
  });
});

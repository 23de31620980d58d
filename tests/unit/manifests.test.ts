import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import fc from "fast-check";
import { parse, parseAllDocuments } from "yaml";
import { type ControllerName, Controllers, resolveControllers } from "../../lib/controllernames.ts";
import { CHART_DIR, deployFiles } from "../../lib/deployfiles.ts";
import { parseCommandLine } from "../../lib/flags.ts";
import {
  APP_NAME,
  BINARY_PATH,
  DEFAULT_CLOUD_CONFIG,
  daemonSetArgs,
  defaultImage,
  defaultSettings,
  type KubeObject,
  LEASE_NAME,
  type ManifestSettings,
  manifests,
  NONROOT_ID,
  renderManifests,
  SECURE_PORT,
  TALOS_SECRET_DIR,
  TALOS_SECRET_NAME,
} from "../../lib/manifests.ts";
import { rbacGrants, rulesFor } from "../../lib/rbacgrants.ts";
import { SERVICE_ACCOUNT_TALOSCONFIG } from "../../lib/talosconfig.ts";
import { renderTalosPatch } from "../../lib/talospatch.ts";
import { EVENTS_NAMESPACE } from "../../lib/wellknown.ts";

const root = join(import.meta.dir, "..", "..");
const pkgVersion = (JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { version: string })
  .version;
const ALL: ControllerName[] = Object.values(Controllers);

function settings(over: Partial<ManifestSettings> = {}): ManifestSettings {
  const enabled = over.enabledControllers ?? ALL;
  return {
    ...defaultSettings("1.2.3"),
    controllers: enabled,
    enabledControllers: enabled,
    ...over,
  };
}

function objectOf(s: ManifestSettings, kind: string, name?: string): KubeObject {
  const o = manifests(s)
    .map((m) => m.object)
    .find((x) => x.kind === kind && (name === undefined || x.metadata.name === name));
  if (!o) throw new Error(`no ${kind} ${name ?? ""}`);
  return o;
}

interface PodSpec {
  hostNetwork: boolean;
  priorityClassName: string;
  serviceAccountName: string;
  nodeSelector: Record<string, string>;
  tolerations: { key: string; operator: string; effect: string }[];
  securityContext: Record<string, unknown>;
  containers: {
    image: string;
    command: string[];
    args: string[];
    env: { name: string; value?: string; valueFrom?: { fieldRef: { fieldPath: string } } }[];
    ports: { name: string; containerPort: number }[];
    livenessProbe: { httpGet: { path: string; port: string; scheme: string } };
    readinessProbe: { httpGet: { path: string; port: string; scheme: string } };
    securityContext: Record<string, unknown>;
    volumeMounts: { name: string; mountPath: string; readOnly: boolean }[];
  }[];
  volumes: {
    name: string;
    configMap?: { name: string };
    secret?: { secretName: string; optional?: boolean };
  }[];
}

function podSpec(s: ManifestSettings): PodSpec {
  const ds = objectOf(s, "DaemonSet") as unknown as { spec: { template: { spec: PodSpec } } };
  return ds.spec.template.spec;
}

function container(s: ManifestSettings) {
  const c = podSpec(s).containers[0];
  if (!c) throw new Error("no container");
  return c;
}

const key = (g: { resource: string; verb: string }) => `${g.resource}:${g.verb}`;

describe("deployFiles() drift", () => {
  test.each(Object.keys(deployFiles(pkgVersion)))(
    "deployFiles() matches deploy/%s (regenerate with `npm run manifests`)",
    (name) => {
      const onDisk = readFileSync(join(root, "deploy", name), "utf8");
      expect(onDisk).toBe(deployFiles(pkgVersion)[name] as string);
    },
  );

  test("deployFiles() writes the defaults of `manifests` for the package version", () => {
    const files = deployFiles(pkgVersion);
    expect(files[`${APP_NAME}.yaml`]).toBe(renderManifests(defaultSettings(pkgVersion)));
    expect(files["talos-patch.yaml"]).toBe(renderTalosPatch(defaultSettings(pkgVersion)));
    expect(files[`${APP_NAME}.yaml`]).toContain(`image: ${defaultImage(pkgVersion)}\n`);
  });
});

describe("the Helm chart's generated data and metadata", () => {
  const chart = join(root, "deploy", CHART_DIR);

  test("Chart.yaml's version and appVersion follow package.json, and the image default follows `manifests`", () => {
    const meta = parse(readFileSync(join(chart, "Chart.yaml"), "utf8")) as {
      version: string;
      appVersion: string;
    };
    expect(meta.version).toBe(pkgVersion);
    expect(meta.appVersion).toBe(`v${pkgVersion}`);
    const values = parse(readFileSync(join(chart, "values.yaml"), "utf8")) as {
      image: { repository: string };
    };
    expect(`${values.image.repository}:${meta.appVersion}`).toBe(defaultImage(pkgVersion));
    // The image the chart renders in place of the Go CCM's is the same one.
    const helpers = readFileSync(join(chart, "templates", "_helpers.tpl"), "utf8");
    const mapped =
      /define "talos-cloud-controller-manager\.imageRepository" -\}\}[\s\S]*?-\}\}\n(\S+)\n/.exec(
        helpers,
      )?.[1];
    expect(mapped).toBe(values.image.repository);
  });

  test("values.yaml has every key of the Go chart's values, with the same kind of value", () => {
    const kind = (v: unknown) => (Array.isArray(v) ? "list" : v === null ? "null" : typeof v);
    const missing: string[] = [];
    const walk = (go: unknown, ours: unknown, path: string) => {
      if (kind(go) !== kind(ours)) {
        missing.push(`${path}: ${kind(go)} in the Go chart, ${kind(ours)} here`);
        return;
      }
      if (kind(go) !== "object") return;
      for (const [k, v] of Object.entries(go as Record<string, unknown>)) {
        walk(v, (ours as Record<string, unknown>)[k], path ? `${path}.${k}` : k);
      }
    };
    const go = parse(readFileSync(join(root, "tests", "fixtures", "go-chart", "values.yaml"), "utf8"));
    walk(go, parse(readFileSync(join(chart, "values.yaml"), "utf8")), "");
    expect(missing).toEqual([]);
  });

  test("files/rbac.yaml holds every grant of rbacGrants(), with who needs it", () => {
    const data = parse(deployFiles(pkgVersion)[`${CHART_DIR}/files/rbac.yaml`] as string) as {
      roles: { scope: string; rules: { resources: string[]; grants: { verb: string; by: string }[] }[] }[];
    };
    const rows = data.roles.flatMap((r) =>
      r.rules.flatMap((rule) => rule.grants.map((g) => `${r.scope} ${rule.resources[0]} ${g.verb} ${g.by}`)),
    );
    const expected = rbacGrants(ALL, LEASE_NAME).map((g) => `${g.scope} ${g.resource} ${g.verb} ${g.by}`);
    expect(rows.sort()).toEqual(expected.sort());
  });

  test("files/ccm-config.yaml is the default cloud config of `manifests`", () => {
    expect(deployFiles(pkgVersion)[`${CHART_DIR}/files/ccm-config.yaml`]).toBe(DEFAULT_CLOUD_CONFIG);
  });
});

describe("renderManifests()", () => {
  test("renderManifests() parses back to exactly manifests(), comments aside", () => {
    const s = settings();
    const docs = parseAllDocuments(renderManifests(s));
    expect(Array.isArray(docs)).toBe(true);
    const parsed = (docs as { toJS(): unknown; errors: unknown[] }[]).map((d) => {
      expect(d.errors).toEqual([]);
      return d.toJS();
    });
    expect(parsed).toEqual(manifests(s).map((m) => m.object));
  });

  test("renderManifests() uses no YAML anchors and documents the omitted flag and the rules", () => {
    const text = renderManifests(settings());
    expect(text).not.toMatch(/[&*]a\d/);
    expect(text).toContain("No --use-service-account-credentials");
    expect(text).toContain("# nodes delete: remove a node whose instance is gone (cloud-node-lifecycle).");
    expect(text).toContain("# leases create: the first replica creates the Lease");
  });

  test("renderManifests() property: any controller set and namespace round-trips", () => {
    fc.assert(
      fc.property(
        fc.subarray(ALL),
        fc.stringMatching(/^[a-z][a-z0-9-]{0,20}[a-z0-9]$/),
        (enabled, namespace) => {
          const s = settings({ enabledControllers: enabled, controllers: enabled, namespace });
          const docs = parseAllDocuments(renderManifests(s)) as { toJS(): unknown }[];
          expect(docs.map((d) => d.toJS())).toEqual(manifests(s).map((m) => m.object));
        },
      ),
      { numRuns: 15 },
    );
  });
});

describe("manifests() objects", () => {
  test("manifests() lists the objects in apply order", () => {
    expect(manifests(settings()).map((m) => `${m.object.kind}/${m.object.metadata.name}`)).toEqual([
      `ServiceAccount/${APP_NAME}`,
      `ServiceAccount/${TALOS_SECRET_NAME}`,
      `ConfigMap/${APP_NAME}`,
      `ClusterRole/system:${APP_NAME}`,
      `ClusterRoleBinding/system:${APP_NAME}`,
      `Role/${APP_NAME}:leader-election`,
      `RoleBinding/${APP_NAME}:leader-election`,
      `Role/${APP_NAME}:events`,
      `RoleBinding/${APP_NAME}:events`,
      `Role/${APP_NAME}:apiserver`,
      `RoleBinding/${APP_NAME}:apiserver`,
      `Service/${APP_NAME}`,
      `DaemonSet/${APP_NAME}`,
    ]);
  });

  test("manifests() puts everything namespaced in --namespace, the Events and API server Roles in default", () => {
    const s = settings({ namespace: "ccm-system" });
    for (const { object } of manifests(s)) {
      if (object.kind.startsWith("Cluster")) expect(object.metadata.namespace).toBeUndefined();
      else if (object.metadata.name.endsWith(":events") || object.metadata.name.endsWith(":apiserver"))
        expect(object.metadata.namespace).toBe(EVENTS_NAMESPACE);
      else expect(object.metadata.namespace).toBe("ccm-system");
      const subjects = object.subjects as unknown[] | undefined;
      if (subjects)
        expect(subjects).toEqual([{ kind: "ServiceAccount", name: APP_NAME, namespace: "ccm-system" }]);
    }
  });

  test("manifests() makes a talos.dev ServiceAccount with role os:reader", () => {
    const sa = objectOf(settings(), "ServiceAccount", TALOS_SECRET_NAME);
    expect(sa.apiVersion).toBe("talos.dev/v1alpha1");
    expect(sa.spec).toEqual({ roles: ["os:reader"] });
  });

  test("manifests() embeds the given cloud config, else the commented default", () => {
    const data = (s: ManifestSettings) => objectOf(s, "ConfigMap").data as Record<string, string>;
    expect(data(settings())).toEqual({ "ccm-config.yaml": DEFAULT_CLOUD_CONFIG });
    expect(data(settings({ cloudConfig: "global:\n  preferIPv6: true\n" }))).toEqual({
      "ccm-config.yaml": "global:\n  preferIPv6: true\n",
    });
  });

  test("manifests() makes a headless Service on the secure port", () => {
    const svc = objectOf(settings(), "Service") as unknown as {
      spec: { clusterIP: string; selector: Record<string, string>; ports: unknown[] };
    };
    expect(svc.spec.clusterIP).toBe("None");
    expect(svc.spec.ports).toEqual([
      { name: "metrics", port: SECURE_PORT, targetPort: "metrics", protocol: "TCP" },
    ]);
    const ds = objectOf(settings(), "DaemonSet") as unknown as {
      spec: { selector: { matchLabels: Record<string, string> }; template: { metadata: { labels: object } } };
    };
    expect(svc.spec.selector).toEqual(ds.spec.selector.matchLabels);
    expect(ds.spec.template.metadata.labels).toMatchObject(ds.spec.selector.matchLabels);
  });

  test("manifests() keeps the reference DaemonSet's immutable selector, so kubectl apply upgrades it", () => {
    const ds = objectOf(settings(), "DaemonSet") as unknown as { spec: { selector: unknown } };
    expect(ds.spec.selector).toEqual({
      matchLabels: {
        "app.kubernetes.io/name": "talos-cloud-controller-manager",
        "app.kubernetes.io/instance": "talos-cloud-controller-manager",
      },
    });
  });
});

describe("manifests() DaemonSet", () => {
  test("the pod runs on control-plane nodes before any CNI", () => {
    const pod = podSpec(settings());
    expect(pod.hostNetwork).toBe(true);
    expect(pod.priorityClassName).toBe("system-cluster-critical");
    expect(pod.serviceAccountName).toBe(APP_NAME);
    expect(pod.nodeSelector).toEqual({ "node-role.kubernetes.io/control-plane": "" });
    expect(pod.tolerations.map((t) => `${t.key}:${t.effect}`).sort()).toEqual([
      "node-role.kubernetes.io/control-plane:NoSchedule",
      "node.cloudprovider.kubernetes.io/uninitialized:NoSchedule",
      "node.kubernetes.io/not-ready:NoSchedule",
    ]);
  });

  test("the pod talks to its own node's API server and apid", () => {
    const env = Object.fromEntries(container(settings()).env.map((e) => [e.name, e]));
    expect(env.TALOS_ENDPOINTS?.valueFrom?.fieldRef.fieldPath).toBe("status.podIP");
    expect(env.KUBERNETES_SERVICE_HOST?.valueFrom?.fieldRef.fieldPath).toBe("status.podIP");
    expect(env.KUBERNETES_SERVICE_PORT?.value).toBe("6443");
    expect(env.TALOSCONFIG?.value).toBe(SERVICE_ACCOUNT_TALOSCONFIG);
  });

  test("the container is non-root, read-only, without capabilities, under seccomp RuntimeDefault", () => {
    const s = settings();
    expect(podSpec(s).securityContext).toMatchObject({
      runAsNonRoot: true,
      runAsUser: NONROOT_ID,
      runAsGroup: NONROOT_ID,
      fsGroup: NONROOT_ID,
    });
    expect(container(s).securityContext).toEqual({
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ["ALL"] },
      seccompProfile: { type: "RuntimeDefault" },
    });
  });

  test("probes use HTTPS on the secure port and paths the server leaves open", () => {
    const c = container(settings());
    expect(c.ports).toEqual([{ name: "metrics", containerPort: SECURE_PORT, protocol: "TCP" }] as never);
    const run = parseCommandLine(c.args);
    if (run.command !== "run") throw new Error("args do not parse as run");
    for (const probe of [c.livenessProbe, c.readinessProbe]) {
      expect(probe.httpGet.scheme).toBe("HTTPS");
      expect(probe.httpGet.port).toBe("metrics");
      expect(run.options.serving.alwaysAllowPaths).toContain(probe.httpGet.path);
    }
    expect(run.options.serving.alwaysAllowPaths).not.toContain("/metrics");
    expect(run.options.serving.securePort).toBe(SECURE_PORT);
  });

  test.each([
    [["cloud-node", "node-csr-approval"]],
    [["node-csr-approval"]],
    [["*", "nodeipam", "cloud-node-lifecycle"]],
  ])("the args parse without warnings to the manifests' settings (--controllers=%p)", (list) => {
    const enabled = resolveControllers(list).enabled;
    const s = settings({ controllers: list, enabledControllers: enabled, namespace: "ccm" });
    const c = container(s);
    expect(c.command).toEqual([BINARY_PATH]);
    const run = parseCommandLine(c.args);
    if (run.command !== "run") throw new Error("args do not parse as run");
    expect(run.warnings).toEqual([]);
    expect(run.options.enabledControllers).toEqual(enabled);
    expect(run.options.useServiceAccountCredentials).toBe(false);
    expect(run.options.leaderElection).toMatchObject({ resourceName: LEASE_NAME, resourceNamespace: "ccm" });
    expect(run.options.ipam.allocateNodeCidrs).toBe(enabled.includes("node-ipam"));
    const mount = c.volumeMounts.find((m) => run.options.cloudConfig?.startsWith(`${m.mountPath}/`));
    expect(mount?.name).toBe("cloud-config");
    expect(Object.keys(objectOf(s, "ConfigMap").data as object)).toEqual([
      (run.options.cloudConfig as string).slice((mount?.mountPath.length ?? 0) + 1),
    ]);
  });

  test("the Talos secret is mounted where the Talos client looks, optional only without a Talos-bound controller", () => {
    for (const [enabled, optional] of [
      [ALL, undefined],
      [["node-csr-approval"], true],
    ] as const) {
      const s = settings({ enabledControllers: enabled, controllers: enabled });
      expect(TALOS_SECRET_DIR).toBe(dirname(SERVICE_ACCOUNT_TALOSCONFIG));
      const mount = container(s).volumeMounts.find((m) => m.mountPath === TALOS_SECRET_DIR);
      const volume = podSpec(s).volumes.find((v) => v.name === mount?.name);
      expect(volume?.secret?.secretName).toBe(TALOS_SECRET_NAME);
      expect(volume?.secret?.optional).toBe(optional);
    }
  });

  test("defaultImage() tags releases v<version> and source builds edge; --image wins", () => {
    expect(defaultImage("0.1.0")).toBe("ghcr.io/talos-ccm/talos-cloud-controller-manager:v0.1.0");
    expect(defaultImage("dev")).toBe("ghcr.io/talos-ccm/talos-cloud-controller-manager:edge");
    expect(container(settings({ version: "2.0.0" })).image).toBe(defaultImage("2.0.0"));
    expect(container(settings({ image: "registry.local:5000/ccm:test" })).image).toBe(
      "registry.local:5000/ccm:test",
    );
    const ds = objectOf(settings({ image: "registry.local:5000/ccm:test" }), "DaemonSet");
    expect(ds.metadata.labels?.["app.kubernetes.io/version"]).toBe("test");
  });
});

describe("manifests() Deployment", () => {
  const deploymentOf = (s: ManifestSettings) =>
    objectOf(s, "Deployment") as unknown as {
      spec: {
        replicas: number;
        strategy: unknown;
        selector: { matchLabels: Record<string, string> };
        template: { metadata: { labels: Record<string, string> }; spec: PodSpec };
      };
    };
  const asDeployment = settings({ workload: "Deployment" });

  test("workload Deployment replaces the DaemonSet with one replica and keeps every other object", () => {
    const kinds = (s: ManifestSettings) =>
      manifests(s).map((m) => `${m.object.kind}/${m.object.metadata.name}`);
    const ds = kinds(settings());
    const dep = kinds(asDeployment);
    expect(dep).toEqual(ds.map((k) => (k === `DaemonSet/${APP_NAME}` ? `Deployment/${APP_NAME}` : k)));
    const d = deploymentOf(asDeployment);
    expect(d.spec.replicas).toBe(1);
    expect(d.spec.strategy).toEqual({
      type: "RollingUpdate",
      rollingUpdate: { maxUnavailable: 1, maxSurge: 0 },
    });
    expect(d.spec.selector.matchLabels).toEqual({
      "app.kubernetes.io/name": APP_NAME,
      "app.kubernetes.io/instance": APP_NAME,
    });
    expect(d.spec.template.metadata.labels).toMatchObject(d.spec.selector.matchLabels);
  });

  test("the Deployment's pod is on the pod network, reaches Talos through the talosconfig and tolerates no not-ready node", () => {
    const pod = deploymentOf(asDeployment).spec.template.spec;
    expect(pod.hostNetwork).toBeUndefined();
    expect((pod as unknown as { dnsPolicy?: string }).dnsPolicy).toBeUndefined();
    expect(pod.tolerations.map((t) => `${t.key}:${t.effect}`).sort()).toEqual([
      "node-role.kubernetes.io/control-plane:NoSchedule",
      "node.cloudprovider.kubernetes.io/uninitialized:NoSchedule",
    ]);
    const c = pod.containers[0];
    expect(c?.env).toEqual([{ name: "TALOSCONFIG", value: SERVICE_ACCOUNT_TALOSCONFIG }]);
  });

  test("the Deployment's container and pod are the DaemonSet's but for the network, environment and tolerations", () => {
    type Loose = Record<string, unknown>;
    const { env: _d, ...fromDs } = container(settings());
    const { env: _p, ...fromDep } = deploymentOf(asDeployment).spec.template.spec.containers[0] ?? {};
    expect(fromDep).toEqual(fromDs);
    const {
      hostNetwork,
      dnsPolicy,
      tolerations: _t,
      containers: _c,
      ...podDs
    } = podSpec(settings()) as unknown as Loose;
    expect([hostNetwork, dnsPolicy]).toEqual([true, "ClusterFirstWithHostNet"]);
    const {
      tolerations: _t2,
      containers: _c2,
      ...podDep
    } = deploymentOf(asDeployment).spec.template.spec as unknown as Loose;
    expect(podDep).toEqual(podDs);
  });

  test("renderManifests() with workload Deployment parses back to manifests()", () => {
    const docs = parseAllDocuments(renderManifests(asDeployment)).map((d) => d.toJS());
    expect(docs).toEqual(manifests(asDeployment).map((m) => m.object));
  });
});

describe("rbacGrants()", () => {
  const runtime = [
    "nodes:list",
    "nodes:watch",
    "tokenreviews:create",
    "subjectaccessreviews:create",
    "leases:create",
    "leases:get",
    "leases:update",
    "events:create",
    "events:patch",
  ];
  test.each<[string, ControllerName[], string[]]>([
    ["no controller", [], runtime],
    ["cloud-node", ["cloud-node"], [...runtime, "nodes:patch", "nodes/status:patch"]],
    [
      "cloud-node-lifecycle",
      ["cloud-node-lifecycle"],
      [...runtime, "nodes:get", "nodes:patch", "nodes:delete"],
    ],
    [
      "node-csr-approval",
      ["node-csr-approval"],
      [
        ...runtime,
        "certificatesigningrequests:list",
        "certificatesigningrequests:watch",
        "certificatesigningrequests/approval:update",
        "signers:approve",
        "servicecidrs:list",
        "servicecidrs:watch",
        "services:get",
        "namespaces:get",
        "services:list",
      ],
    ],
    ["node-ipam", ["node-ipam"], [...runtime, "nodes:patch", "nodes:get"]],
  ])("rbacGrants() for %s", (_name, enabled, expected) => {
    expect(new Set(rbacGrants(enabled, LEASE_NAME).map(key))).toEqual(new Set(expected));
  });

  test("rbacGrants() never grants token minting, secrets or wildcards", () => {
    const grants = rbacGrants(ALL, LEASE_NAME);
    for (const g of grants) {
      expect(g.resource).not.toMatch(/serviceaccounts|secrets|\*/);
      expect(g.verb).not.toMatch(/\*|escalate|bind|impersonate/);
    }
  });

  test("rbacGrants() limits the Lease's get and update, and approve, by name", () => {
    const named = rbacGrants(ALL, "my-lease").filter((g) => g.resourceNames);
    expect(named.map((g) => `${key(g)}=${g.resourceNames?.join(",")}`)).toEqual([
      "signers:approve=kubernetes.io/kubelet-serving",
      "services:get=kubernetes",
      "leases:get=my-lease",
      "leases:update=my-lease",
    ]);
  });

  test("rulesFor() grants every verb once, in one rule per resource", () => {
    fc.assert(
      fc.property(fc.subarray(ALL), (enabled) => {
        const grants = rbacGrants(enabled, LEASE_NAME);
        const rules = rulesFor(grants).map((r) => r.rule);
        const granted = rules.flatMap((r) =>
          r.verbs.map((v) => `${r.resources[0]}:${v}:${r.resourceNames ?? ""}`),
        );
        expect(new Set(granted).size).toBe(granted.length);
        expect(new Set(granted)).toEqual(
          new Set(grants.map((g) => `${g.resource}:${g.verb}:${g.resourceNames ?? ""}`)),
        );
      }),
    );
  });

  test("manifests() puts each grant in the object of its scope", () => {
    const s = settings();
    const rules = (name: string) =>
      (objectOf(s, name.startsWith("system:") ? "ClusterRole" : "Role", name).rules ?? []) as {
        resources: string[];
        verbs: string[];
      }[];
    const verbs = (name: string) => rules(name).flatMap((r) => r.verbs.map((v) => `${r.resources[0]}:${v}`));
    expect(verbs(`${APP_NAME}:leader-election`).sort()).toEqual([
      "leases:create",
      "leases:get",
      "leases:update",
    ]);
    expect(verbs(`${APP_NAME}:events`).sort()).toEqual(["events:create", "events:patch"]);
    expect(verbs(`system:${APP_NAME}`).some((v) => v.startsWith("leases") || v.startsWith("events"))).toBe(
      false,
    );
  });
});

describe("renderTalosPatch()", () => {
  interface TalosPatch {
    machine: {
      kubelet: { extraArgs: Record<string, string> };
      features: { kubernetesTalosAPIAccess: Record<string, unknown> };
    };
    cluster: { externalCloudProvider: unknown; controllerManager?: unknown; inlineManifests: unknown };
  }
  const patchOf = (s: ManifestSettings) => parse(renderTalosPatch(s)) as TalosPatch;

  test("renderTalosPatch() has the Talos machine-config paths that install the CCM", () => {
    const s = defaultSettings("1.2.3");
    const p = patchOf(s);
    expect(p.machine.kubelet.extraArgs).toEqual({
      "cloud-provider": "external",
      "rotate-server-certificates": "true",
    });
    expect(p.machine.features.kubernetesTalosAPIAccess).toEqual({
      enabled: true,
      allowedRoles: ["os:reader"],
      allowedKubernetesNamespaces: ["kube-system"],
    });
    expect(p.cluster.externalCloudProvider).toEqual({ enabled: true });
    expect(p.cluster.inlineManifests).toEqual([{ name: APP_NAME, contents: renderManifests(s) }]);
    expect(p.cluster.controllerManager).toBeUndefined();
    expect(Object.keys(p).sort()).toEqual(["cluster", "machine"]);
  });

  test("renderTalosPatch() allows Talos API access from --namespace", () => {
    const p = patchOf(settings({ namespace: "ccm" }));
    expect(p.machine.features.kubernetesTalosAPIAccess.allowedKubernetesNamespaces).toEqual(["ccm"]);
  });

  test("renderTalosPatch() asks for kubelet serving certificates only when node-csr-approval approves them", () => {
    const p = patchOf(settings({ enabledControllers: ["cloud-node"], controllers: ["cloud-node"] }));
    expect(p.machine.kubelet.extraArgs).toEqual({ "cloud-provider": "external" });
  });

  test("renderTalosPatch() turns kube-controller-manager's node IPAM off when node-ipam runs", () => {
    const p = patchOf(
      settings({ enabledControllers: ["cloud-node", "node-ipam"], controllers: ["*", "node-ipam"] }),
    );
    expect(p.cluster.controllerManager).toEqual({
      extraArgs: { controllers: "*,tokencleaner,-node-ipam-controller" },
    });
  });

  test("renderTalosPatch() explains how to apply it to control-plane and worker nodes", () => {
    const text = renderTalosPatch(defaultSettings("1.2.3"));
    expect(text).toContain("--config-patch-control-plane @talos-patch.yaml");
    const worker = text.match(/--config-patch-worker '([^']+)'/)?.[1] ?? "";
    expect(JSON.parse(worker)).toEqual({
      machine: { kubelet: patchOf(defaultSettings("1.2.3")).machine.kubelet },
    });
  });
});

describe("DEFAULT_CLOUD_CONFIG", () => {
  test("DEFAULT_CLOUD_CONFIG loads as the defaults, without warnings", async () => {
    const { parseConfig } = await import("../../lib/config.ts");
    const c = parseConfig(DEFAULT_CLOUD_CONFIG);
    expect(c.warnings).toEqual([]);
    expect(c.transformations).toEqual([]);
    expect(c.global).toEqual(parseConfig("").global);
  });

  test("DEFAULT_CLOUD_CONFIG's commented settings and example rule are valid when uncommented", async () => {
    const { parseConfig } = await import("../../lib/config.ts");
    // A commented setting is "# key: ..." or "# - ..."; descriptions are sentences.
    const setting = /^(\s*)# ( *(?:[A-Za-z][\w./-]*:(?: |$)|- ).*)$/;
    const text = DEFAULT_CLOUD_CONFIG.split("\n")
      .map((l) => l.replace(setting, "$1$2"))
      .join("\n");
    expect(text).not.toBe(DEFAULT_CLOUD_CONFIG);
    const c = parseConfig(text);
    expect(c.warnings).toEqual([]);
    expect(c.global).toMatchObject({ clusterName: "my-cluster", preferIPv6: false, reconcile: false });
    expect(c.transformations.map((r) => r.name)).toEqual(["web"]);
    expect(c.transformations[0]?.features.publicIPDiscovery).toBe(true);
  });
});

describe("deploy/Dockerfile", () => {
  const dockerfile = readFileSync(join(root, "deploy", "Dockerfile"), "utf8");
  const instructions = dockerfile
    .split("\n")
    .filter((l) => l.trim() !== "" && !l.startsWith("#"))
    .map((l) => l.trim());

  test("deploy/Dockerfile builds on a distroless glibc base (the binary links glibc)", () => {
    const from = instructions.filter((l) => l.startsWith("FROM "));
    expect(from).toHaveLength(1);
    expect(from[0]).toMatch(/^FROM gcr\.io\/distroless\/(base|cc)-debian1\d(:nonroot)?$/);
  });

  test("deploy/Dockerfile copies build.ts' binary for the target architecture to the DaemonSet's command", () => {
    expect(instructions).toContain("ARG TARGETARCH");
    const copy = instructions.find((l) => l.startsWith("COPY "));
    expect(copy).toMatch(
      new RegExp(`dist/talos-cloud-controller-manager-linux-\\$\\{TARGETARCH\\} ${BINARY_PATH}$`),
    );
    expect(instructions).toContain(`ENTRYPOINT ["${BINARY_PATH}"]`);
    expect(container(settings()).command).toEqual([BINARY_PATH]);
  });

  test("deploy/Dockerfile runs as the non-root user the DaemonSet expects", () => {
    const user = instructions.filter((l) => l.startsWith("USER "));
    expect(user).toEqual([`USER ${NONROOT_ID}:${NONROOT_ID}`]);
    expect(podSpec(settings()).securityContext.runAsUser).toBe(NONROOT_ID);
  });
});

test("daemonSetArgs() passes --controllers through as given", () => {
  const s = settings({
    controllers: ["*", "-cloud-node", "node-csr-approval"],
    enabledControllers: ["node-csr-approval"],
  });
  expect(daemonSetArgs(s)).toContain("--controllers=*,-cloud-node,node-csr-approval");
});

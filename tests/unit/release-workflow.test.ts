// The release workflow (.github/workflows/release.yml) against what `npm run release` writes and
// publishes (build.ts): the trigger, each job's permissions, the actions pinned by commit, the names
// taken from `bun build.ts --names` (run here for real), and the steps' scripts run here with bash as
// the runner runs them (`bash -eo pipefail`, its GITHUB_* variables and expressions filled in), with
// the forge-only tools (crane, helm, cosign, gh) replaced by recorders: the tag must be the
// package's version, the base must be pulled by its pinned digest, the pushed index must be the
// release's, cosign must sign exactly the digests pushed, and the release must attach every file a
// release writes (releaseAssets()). The pull requests' workflow (.github/workflows/ci.yml), which
// the release calls as its `checks` job before it builds: lint, unit tests and the whole suite, the
// test bed's cache keyed by the files that pin its versions and off in the release. actionlint's
// checks of both need actionlint built: tests/e2e/workflows-actionlint.test.ts.

import { afterAll, describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parse } from "yaml";
import { namesLines, publishedNames, releaseAssets, sha256sums } from "../../build.ts";

const root = join(import.meta.dir, "..", "..");
const workflowPath = join(root, ".github", "workflows", "release.yml");
const workflowText = readFileSync(workflowPath, "utf8");
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { version: string };
const names = publishedNames(pkg.version);

interface Step {
  name: string;
  id?: string;
  if?: string;
  uses?: string;
  run?: string;
  with?: Record<string, unknown>;
  env?: Record<string, string>;
  "working-directory"?: string;
}
interface Job {
  name?: string;
  needs?: string | string[];
  permissions: Record<string, string>;
  outputs?: Record<string, string>;
  env?: Record<string, string>;
  /** A job that calls a reusable workflow has `uses` and `with` instead of steps. */
  steps: Step[];
  uses?: string;
  with?: Record<string, unknown>;
}
interface Workflow {
  on: Record<string, unknown>;
  permissions: Record<string, string>;
  env: Record<string, string>;
  jobs: Record<string, Job>;
}
const workflow = parse(workflowText) as Workflow;
const ciPath = join(root, ".github", "workflows", "ci.yml");
const ciText = readFileSync(ciPath, "utf8");
const ci = parse(ciText) as Workflow;
/** The release's jobs that run steps (not the call of ci.yml). */
const stepJobs = () => Object.entries(workflow.jobs).filter(([, j]) => j.uses === undefined);

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), "talos-ccm-workflow-unit-"));
  dirs.push(d);
  return d;
}
/** A workflow expression as the YAML spells it, `${{ expr }}`. */
const gh = (expr: string) => `\${{ ${expr} }}`;
const sha256 = (s: string | Uint8Array) => createHash("sha256").update(s).digest("hex");
const digest = (s: string) => `sha256:${sha256(s)}`;

function job(name: string): Job {
  const j = workflow.jobs[name];
  if (!j) throw new Error(`Cannot find job ${name} in the release workflow`);
  return j;
}
function step(jobName: string, stepName: string): Step {
  const s = job(jobName).steps.find((x) => x.name === stepName);
  if (!s) throw new Error(`Cannot find step "${stepName}" in job ${jobName}`);
  return s;
}

type Context = Record<string, unknown>;
/** `${{ a.b.c }}` expressions filled in from `ctx` (dotted paths only; anything else throws). */
function expand(text: string, ctx: Context): string {
  return text.replace(/\$\{\{\s*([^}]*?)\s*\}\}/g, (_, expr: string) => {
    if (!/^[a-z_]+(\.[A-Za-z_-]+)+$/.test(expr)) throw new Error(`Cannot evaluate \${{ ${expr} }} here`);
    let v: unknown = ctx;
    for (const part of expr.split(".")) v = (v as Record<string, unknown> | undefined)?.[part];
    if (typeof v !== "string") throw new Error(`Cannot evaluate \${{ ${expr} }}: no value`);
    return v;
  });
}

/** A recording stand-in for a forge-only tool: logs its arguments, then runs `body` (bash). */
function fakeTool(bin: string, name: string, body = ""): void {
  writeFileSync(
    join(bin, name),
    `#!/usr/bin/env bash\nset -eo pipefail\nprintf '%s\\0' ${name} "$@" >>"$FAKE_LOG"\nprintf '\\036' >>"$FAKE_LOG"\n${body}\n`,
  );
  chmodSync(join(bin, name), 0o755);
}
/** The calls the fake tools recorded, each as its argv (NUL between arguments, RS after each call). */
function calls(log: string): string[][] {
  if (!existsSync(log)) return [];
  return readFileSync(log, "utf8")
    .split("\x1e")
    .filter((l) => l !== "")
    .map((l) => l.split("\0").slice(0, -1));
}

interface StepRun {
  status: number | null;
  stdout: string;
  stderr: string;
  outputs: Record<string, string>;
  calls: string[][];
}
interface StepEnv {
  /** GITHUB_* and runner variables beyond the defaults below. */
  vars?: Record<string, string>;
  /** The contexts the expressions read (steps, needs, ...), besides env, github and runner. */
  ctx?: Context;
  /** The working directory's parent when the step names one; else the working directory. */
  cwd: string;
  fakes?: Record<string, string>;
}

/** Runs one step's script as the runner would: `bash --noprofile --norc -eo pipefail`. */
function runStep(jobName: string, stepName: string, e: StepEnv): StepRun {
  const j = job(jobName);
  const s = step(jobName, stepName);
  if (s.run === undefined) throw new Error(`Cannot run step "${stepName}": it runs no script`);
  const temp = tempDir();
  const bin = join(temp, "bin");
  mkdirSync(bin);
  for (const [name, body] of Object.entries(e.fakes ?? {})) fakeTool(bin, name, body);
  const ctx: Context = { github: { token: "gh-token" }, runner: { temp }, ...e.ctx };
  ctx.env = Object.fromEntries(Object.entries(workflow.env).map(([k, v]) => [k, expand(String(v), ctx)]));
  const env: Record<string, string> = {
    PATH: `${bin}:${process.env.PATH}`,
    HOME: temp,
    RUNNER_TEMP: temp,
    GITHUB_OUTPUT: join(temp, "output"),
    GITHUB_PATH: join(temp, "path"),
    GITHUB_REF_NAME: names.tag,
    GITHUB_REF: `refs/tags/${names.tag}`,
    GITHUB_REPOSITORY: "owner/repo",
    GITHUB_SERVER_URL: "https://github.com",
    GITHUB_WORKFLOW_REF: `owner/repo/.github/workflows/release.yml@refs/tags/${names.tag}`,
    GITHUB_ACTOR: "releaser",
    FAKE_LOG: join(temp, "calls"),
    ...(ctx.env as Record<string, string>),
    ...e.vars,
  };
  for (const [k, v] of Object.entries({ ...j.env, ...s.env })) env[k] = expand(String(v), ctx);
  const script = join(temp, "step.sh");
  writeFileSync(script, expand(s.run, ctx));
  const r = spawnSync("bash", ["--noprofile", "--norc", "-eo", "pipefail", script], {
    cwd: s["working-directory"] ? join(e.cwd, s["working-directory"]) : e.cwd,
    env,
    encoding: "utf8",
  });
  const out = existsSync(env.GITHUB_OUTPUT as string)
    ? readFileSync(env.GITHUB_OUTPUT as string, "utf8")
    : "";
  const outputs = Object.fromEntries(
    out
      .split("\n")
      .filter((l) => l.includes("="))
      .map((l) => [l.slice(0, l.indexOf("=")), l.slice(l.indexOf("=") + 1)]),
  );
  return {
    status: r.status,
    stdout: r.stdout,
    stderr: r.stderr,
    outputs,
    calls: calls(env.FAKE_LOG as string),
  };
}

let builtOutputs: Record<string, string> | undefined;
/** The build job's outputs, from its "Published names" step run for real (bun build.ts --names), once. */
function buildOutputs(): Record<string, string> {
  if (builtOutputs) return builtOutputs;
  const r = runStep("build", "Published names", { cwd: root });
  expect(r.status).toBe(0);
  const steps = { names: { outputs: r.outputs } };
  builtOutputs = Object.fromEntries(
    Object.entries(job("build").outputs ?? {}).map(([k, v]) => [k, expand(v, { steps })]),
  );
  return builtOutputs;
}

/** A release folder: every asset with made-up contents, image/index.json, and SHA256SUMS of them. */
function releaseFolder(indexDigest: string): string {
  const out = join(tempDir(), "dist", "release");
  mkdirSync(join(out, "image"), { recursive: true });
  const files = releaseAssets(pkg.version).filter((f) => f !== "SHA256SUMS");
  for (const f of files) writeFileSync(join(out, f), `contents of ${f}\n`);
  const index = JSON.stringify({
    schemaVersion: 2,
    manifests: [{ mediaType: "application/vnd.oci.image.index.v1+json", digest: indexDigest, size: 1 }],
  });
  writeFileSync(join(out, "image", "index.json"), index);
  writeFileSync(
    join(out, "SHA256SUMS"),
    sha256sums(
      [...files, "image/index.json"].map((name) => ({ name, sha256: sha256(readFileSync(join(out, name))) })),
    ),
  );
  return out;
}

describe("release workflow: trigger, permissions, pins", () => {
  test("it runs on v* tags only", () => {
    expect(workflow.on).toEqual({ push: { tags: ["v*"] } });
  });

  test("permissions: none by default; each job only what it needs", () => {
    expect(workflow.permissions).toEqual({});
    expect(Object.fromEntries(Object.entries(workflow.jobs).map(([k, j]) => [k, j.permissions]))).toEqual({
      checks: { contents: "read" },
      build: { contents: "read" },
      publish: { packages: "write", "id-token": "write" },
      release: { contents: "write" },
    });
  });

  test("the job that runs npm ci (third-party code) holds no write permission and no OIDC token", () => {
    const runsNpm = stepJobs().filter(([, j]) => j.steps.some((s) => /\bnpm\b/.test(s.run ?? "")));
    expect(runsNpm.map(([k]) => k)).toEqual(["build"]);
    // The checks (ci.yml) run npm ci too: every one of their jobs only reads.
    for (const j of Object.values(ci.jobs)) expect(j.permissions).toEqual({ contents: "read" });
    for (const [, j] of runsNpm) expect(Object.values(j.permissions).every((p) => p === "read")).toBe(true);
    const checkout = step("build", "Checkout");
    expect(checkout.with?.["persist-credentials"]).toBe(false);
  });

  test("every action is pinned by a full commit SHA, with its version beside it", () => {
    for (const text of [workflowText, ciText]) {
      const uses = text
        .split("\n")
        .filter((l) => /^\s*(-\s+)?uses:/.test(l) && !l.includes("uses: ./.github/workflows/"));
      expect(uses.length).toBeGreaterThan(5);
      for (const line of uses) expect(line).toMatch(/uses: [\w.-]+\/[\w.-]+@[0-9a-f]{40} # v\d+\.\d+\.\d+$/);
    }
  });

  test("no cache is restored into a release job, the checks' included", () => {
    for (const [, j] of stepJobs()) {
      for (const s of j.steps) {
        expect(s.uses ?? "").not.toMatch(/^actions\/cache@/);
        expect(s.with?.cache ?? false).toBe(false);
      }
    }
    expect(job("checks").with).toEqual({ fresh_testbed: true });
    for (const j of Object.values(ci.jobs)) {
      for (const s of j.steps) {
        if ((s.uses ?? "").startsWith("actions/cache@")) expect(s.if).toBe(gh("!inputs.fresh_testbed"));
        else expect(s.with?.cache ?? false).toBe(false);
      }
    }
  });

  test("the release builds only after the pull requests' checks pass", () => {
    expect(job("checks").uses).toBe("./.github/workflows/ci.yml");
    expect(job("build").needs).toBe("checks");
    expect(job("publish").needs).toBe("build");
  });

  test("the base is distroless base-debian12:nonroot pinned by digest", () => {
    expect(workflow.env.BASE_IMAGE).toMatch(
      /^gcr\.io\/distroless\/base-debian12:nonroot@sha256:[0-9a-f]{64}$/,
    );
  });
});

describe("release workflow: the names come from build.ts --names", () => {
  test("the build job's outputs are publishedNames() of package.json's version", () => {
    expect(buildOutputs()).toEqual({
      version: names.version,
      tag: names.tag,
      registry: names.registry,
      image: names.image,
      chart_repository: names.chartRepository,
      chart: names.chart,
      chart_file: names.chartFile,
    });
  });

  test("publishedNames() is the manifests' image, its tag and the charts repository beside it", () => {
    expect(publishedNames("0.1.0")).toEqual({
      version: "0.1.0",
      tag: "v0.1.0",
      registry: "ghcr.io",
      image: "ghcr.io/talos-ccm/talos-cloud-controller-manager",
      chartRepository: "oci://ghcr.io/talos-ccm/charts",
      chart: "ghcr.io/talos-ccm/charts/talos-cloud-controller-manager",
      chartFile: "talos-cloud-controller-manager-0.1.0.tgz",
    });
    expect(namesLines(publishedNames("0.1.0")).split("\n")).toContain(
      "chart_file=talos-cloud-controller-manager-0.1.0.tgz",
    );
  });

  test("the workflow spells neither the registry, the owner nor the image", () => {
    const [registry, owner] = names.image.split("/");
    for (const literal of [registry, owner, names.image])
      expect(workflowText).not.toContain(literal as string);
  });

  test("a tag that is not package.json's version fails the build", () => {
    const ctx = { steps: { names: { outputs: { tag: names.tag } } } };
    expect(runStep("build", "The tag is the version in package.json", { cwd: root, ctx }).status).toBe(0);
    const other = runStep("build", "The tag is the version in package.json", {
      cwd: root,
      ctx,
      vars: { GITHUB_REF_NAME: "v99.0.0" },
    });
    expect(other.status).not.toBe(0);
    expect(other.stdout).toContain(`package.json's version publishes ${names.tag}`);
  });
});

describe("release workflow: the base", () => {
  const pinned = (workflow.env.BASE_IMAGE as string).slice(
    (workflow.env.BASE_IMAGE as string).indexOf("@") + 1,
  );
  // crane pull --format=oci REF DIR, writing an index.json naming `d`.
  const crane = (d: string) =>
    `mkdir -p "$4"; printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"${d}","size":1}]}' >"$4/index.json"`;

  test("the base is pulled by its pinned digest into the layout npm run release builds on", () => {
    const r = runStep("build", "Pull the base image by digest", {
      cwd: root,
      fakes: { crane: crane(pinned) },
    });
    expect(r.status).toBe(0);
    expect(r.calls.map((c) => c.slice(0, 4))).toEqual([
      ["crane", "pull", "--format=oci", workflow.env.BASE_IMAGE as string],
    ]);
    expect(r.calls[0]?.[4]).toMatch(/\/base$/);
    expect(step("build", "Pull the base image by digest").run).toContain(`"$RUNNER_TEMP/base"`);
    const release = step("build", "npm run release").run ?? "";
    expect(release).toContain(`--base "$RUNNER_TEMP/base" --base-name "$BASE_IMAGE"`);
  });

  test("a layout of another digest, or a base not pinned by digest, fails before anything is built", () => {
    const other = runStep("build", "Pull the base image by digest", {
      cwd: root,
      fakes: { crane: crane(digest("x")) },
    });
    expect(other.status).not.toBe(0);
    const byTag = runStep("build", "Pull the base image by digest", {
      cwd: root,
      vars: { BASE_IMAGE: "gcr.io/distroless/base-debian12:nonroot" },
      fakes: { crane: crane(pinned) },
    });
    expect(byTag.status).not.toBe(0);
    expect(byTag.calls).toEqual([]);
  });
});

describe("release workflow: push, sign, attach", () => {
  const indexDigest = digest("the release's image index");
  const chartDigest = digest("the chart's manifest");

  /** The publish job's push steps with recording crane and helm; their outputs. */
  function push(craneDigest: string): { image: StepRun; chart: StepRun; cwd: string } {
    const out = releaseFolder(indexDigest);
    const cwd = join(out, "..", "..");
    const needs = { build: { outputs: buildOutputs() } };
    const image = runStep("publish", "Push the image index", {
      cwd,
      ctx: { needs },
      fakes: { crane: `echo "$IMAGE@${craneDigest}"` },
    });
    const chart = runStep("publish", "Push the chart", {
      cwd,
      ctx: { needs },
      // helm v3.22.0 pkg/registry/client.go Push: "Pushed: <ref>\nDigest: <digest>\n" on stderr.
      fakes: {
        helm: `echo "Pushed: ${names.chart.replace("oci://", "")}:${pkg.version}" >&2; echo "Digest: ${chartDigest}" >&2`,
      },
    });
    return { image, chart, cwd };
  }

  test("the image index is pushed by tag, and the pushed digest must be the release's image/index.json", () => {
    const { image, chart } = push(indexDigest);
    expect(image.status).toBe(0);
    expect(image.calls).toEqual([["crane", "push", "dist/release/image", `${names.image}:${names.tag}`]]);
    expect(image.outputs.digest).toBe(indexDigest);
    expect(chart.status).toBe(0);
    expect(chart.calls).toEqual([["helm", "push", `dist/release/${names.chartFile}`, names.chartRepository]]);
    expect(chart.outputs.digest).toBe(chartDigest);
    expect(push(digest("another index")).image.status).not.toBe(0);
  });

  test("cosign signs, then verifies as a user would, exactly the two digests pushed", () => {
    const { image, chart, cwd } = push(indexDigest);
    const ctx = {
      needs: { build: { outputs: buildOutputs() } },
      steps: { image: { outputs: image.outputs }, chart: { outputs: chart.outputs } },
    };
    const sign = runStep("publish", "Sign the image and the chart by digest (keyless)", {
      cwd,
      ctx,
      fakes: { cosign: "" },
    });
    expect(sign.status).toBe(0);
    expect(sign.calls).toEqual([
      ["cosign", "sign", "--yes", "--recursive", `${names.image}@${indexDigest}`],
      ["cosign", "sign", "--yes", `${names.chart}@${chartDigest}`],
    ]);
    const verify = runStep("publish", "Verify the signatures as a user would", {
      cwd,
      ctx,
      fakes: { cosign: "" },
    });
    expect(verify.status).toBe(0);
    const identity = `https://github.com/owner/repo/.github/workflows/release.yml@refs/tags/${names.tag}`;
    const issuer = "https://token.actions.githubusercontent.com";
    expect(verify.calls).toEqual(
      [`${names.image}@${indexDigest}`, `${names.chart}@${chartDigest}`].map((ref) => [
        "cosign",
        "verify",
        ref,
        "--certificate-identity",
        identity,
        "--certificate-oidc-issuer",
        issuer,
      ]),
    );
    // cosign keyless needs the OIDC token: only the job that signs has it.
    expect(job("publish").permissions["id-token"]).toBe("write");
  });

  /** The release job's attach step with a recording gh, for `tag`. */
  function attach(tag: string): StepRun {
    const out = releaseFolder(indexDigest);
    return runStep("release", "Attach the release folder", {
      cwd: join(out, "..", ".."),
      ctx: {
        needs: {
          build: { outputs: { ...buildOutputs(), tag } },
          publish: { outputs: { image_digest: indexDigest, chart_digest: chartDigest } },
        },
      },
      fakes: { gh: "" },
    });
  }

  test("the release attaches every file a release writes but the image layout, and SHA256SUMS", () => {
    const r = attach(names.tag);
    expect(r.status).toBe(0);
    const [call] = r.calls;
    expect(call?.slice(0, 9)).toEqual([
      "gh",
      "release",
      "create",
      names.tag,
      "--repo",
      "owner/repo",
      "--verify-tag",
      "--title",
      names.tag,
    ]);
    expect(call?.[9]).toBe("--notes");
    expect(call?.slice(11).sort()).toEqual(releaseAssets(pkg.version));
    expect(releaseAssets(pkg.version)).toContain("SHA256SUMS");
    const notes = call?.[10] ?? "";
    expect(notes).toContain(`${names.image}@${indexDigest}`);
    expect(notes).toContain(`${names.chart}@${chartDigest}`);
    expect(notes).toContain("sha256sum --check --ignore-missing SHA256SUMS");
  });

  test("a tag with a pre-release part makes a pre-release", () => {
    expect(attach(`${names.tag}-rc.1`).calls[0]?.slice(0, 5)).toEqual([
      "gh",
      "release",
      "create",
      `${names.tag}-rc.1`,
      "--prerelease",
    ]);
    expect(attach(names.tag).calls[0]).not.toContain("--prerelease");
  });
});

describe("pull requests' workflow (ci.yml)", () => {
  test("it runs on pull requests and as the release's checks, reading only", () => {
    expect(ci.on).toEqual({
      pull_request: null,
      workflow_call: {
        inputs: {
          fresh_testbed: {
            description: expect.any(String),
            type: "boolean",
            default: false,
          },
        },
      },
    });
    expect(ci.permissions).toEqual({});
    for (const j of Object.values(ci.jobs)) {
      const checkout = j.steps.find((s) => s.name === "Checkout");
      expect(checkout?.with?.["persist-credentials"]).toBe(false);
    }
  });

  test("lint, unit tests and the whole suite, each after npm ci", () => {
    const runs = Object.fromEntries(
      Object.entries(ci.jobs).map(([k, j]) => [k, j.steps.flatMap((s) => (s.run ? [s.run.trim()] : []))]),
    );
    expect(runs.lint).toEqual(["npm ci --no-audit --no-fund", "npm run lint"]);
    expect(runs.unit).toEqual(["npm ci --no-audit --no-fund", "npm run test:unit"]);
    expect(runs.e2e?.slice(0, 2)).toEqual([
      "npm ci --no-audit --no-fund",
      'sudo env "PATH=$PATH" "TESTBED_CACHE=$TESTBED_CACHE" npm test',
    ]);
  });

  test("npm run test:unit runs the unit tests through tests/run.ts", () => {
    const scripts = (
      JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { scripts: Record<string, string> }
    ).scripts;
    expect(scripts["test:unit"]).toBe("bun tests/run.ts tests/unit");
  });

  test("the test bed's cache is keyed by every file that pins a version it builds", () => {
    const e2e = ci.jobs.e2e as Job;
    const cache = e2e.steps.find((s) => (s.uses ?? "").startsWith("actions/cache@"));
    expect(cache?.with?.path).toBe(gh("env.TESTBED_CACHE"));
    const key = String(cache?.with?.key);
    const globs = [...key.matchAll(/hashFiles\(([^)]*)\)/g)].flatMap((m) =>
      [...(m[1] as string).matchAll(/'([^']+)'/g)].map((g) => g[1] as string),
    );
    const hashed = new Set(globs.flatMap((g) => [...new Bun.Glob(g).scanSync({ cwd: root })]));
    for (const f of [
      "tests/support/pins.ts",
      "tests/support/kubematrix.ts",
      "tests/support/testbed-bins.sh",
      "tests/support/cloudccm-bins.sh",
      "tests/support/actionlint.sh",
      "tests/support/h2peer-bins.sh",
      "tests/support/ociregistry-bins.sh",
      "tests/support/promtool-bins.sh",
      "tests/support/upstreamcheck-bins.sh",
      "tests/support/gomodule.sh",
      "tests/support/talossim/go.sum",
      "tests/support/h2peer/go.sum",
      "tests/support/upstreamcheck/go.sum",
    ])
      expect({ f, hashed: hashed.has(f) }).toEqual({ f, hashed: true });
    // The cache lives outside the checkout, where the scripts look for it.
    expect(e2e.env?.TESTBED_CACHE).toBe(`${gh("github.workspace")}/../testbed-cache`);
  });
});

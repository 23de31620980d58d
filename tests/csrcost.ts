// `bun tests/csrcost.ts [--rounds N]`: the CPU one CSR decision costs (lib/csr.ts decide(), request
// parsing and signature verification included), median and max of N rounds, at the per-peer bounds
// (lib/peerlimits.ts) and beyond them. Cases:
//   bounds:  csr_sans IP SANs, each in the Node's status and reported by Talos, against a machine
//            reporting talos_addresses addresses and a NodeIPConfig of talos_list_entries excluded
//            subnets, none of which holds a SAN (every check runs to the end: the CSR is approved);
//   old:     the case issue 40 measured before the bounds: 9 IP SANs against 40,000 addresses (an
//            8 MiB address list) and 150,000 excluded subnets (a 4 MiB NodeIPConfig);
//   honest:  a kubelet's CSR (its name and one IP) against a machine with 8 addresses and 4 subnets.
// Prints one line per case. Nothing is asserted: speed is measured, not tested.

import { type CsrInput, checkCsr, decide, type NodeInput, type TalosFacts } from "../lib/csr.ts";
import { PEER_LIMITS } from "../lib/peerlimits.ts";
import { b64, servingCsr, USER_A } from "./support/csrinput.ts";
import { createCSR } from "./support/pki.ts";

const rounds = Number(process.argv[process.argv.indexOf("--rounds") + 1] || 0) || 9;

/** The i-th IP SAN: 10.<1 + i/256>.<i%256>.5, on a /24 of its own. */
const sanIP = (i: number) => `10.${1 + (i >> 8)}.${i & 255}.5`;

interface Case {
  name: string;
  sans: number;
  addresses: number;
  subnets: number;
}

async function setUp(c: Case): Promise<{ csr: CsrInput; node: NodeInput; talos: TalosFacts }> {
  // One DNS SAN (the node's name) and the rest IP SANs.
  const ips = Array.from({ length: c.sans - 1 }, (_, i) => sanIP(i));
  const { csr: pem } = await createCSR({ cn: USER_A, o: ["system:nodes"], dns: ["worker-a"], ips });
  const node: NodeInput = {
    name: "worker-a",
    addresses: ips.map((address) => ({ type: "InternalIP", address })),
  };
  // The SANs' own /24s, then other addresses on 172.16.0.0/12.
  const addresses = ips.map((ip) => `${ip}/24`);
  for (let i = addresses.length; i < c.addresses; i++)
    addresses.push(`172.${16 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}/24`);
  const excludedSubnets = Array.from(
    { length: c.subnets },
    (_, i) => `192.${168 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}/32`,
  );
  const talos: TalosFacts = {
    nodeIP: ips[0] as string,
    nodename: "worker-a",
    addresses,
    dnsNames: [],
    sharedAddresses: new Map(),
    excludedSubnets,
  };
  return { csr: servingCsr(b64(pem)), node, talos };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] as number;
}

const L = PEER_LIMITS;
const cases: Case[] = [
  { name: "honest", sans: 2, addresses: 8, subnets: 4 },
  {
    name: "bounds",
    sans: L.csr_sans.value,
    addresses: L.talos_addresses.value,
    subnets: L.talos_list_entries.value,
  },
  { name: "old", sans: 9, addresses: 40_000, subnets: 150_000 },
];

console.log(`rounds=${rounds} (median and max of each, ms of one decide() call)`);
for (const c of cases) {
  const { csr, node, talos } = await setUp(c);
  const first = decide(csr, node, talos);
  const oneRound = c.name === "old" && process.argv.includes("--quick");
  const times: number[] = [];
  for (let r = 0; r < (oneRound ? 1 : rounds); r++) {
    const t0 = performance.now();
    decide(csr, node, talos);
    times.push(performance.now() - t0);
  }
  const checked = checkCsr(csr);
  const t0 = performance.now();
  if (!("action" in checked)) decide(checked, node, talos);
  const afterParse = performance.now() - t0;
  console.log(
    `${c.name.padEnd(7)} sans=${c.sans} addresses=${c.addresses} subnets=${c.subnets}: ` +
      `median ${median(times).toFixed(2)} ms, max ${Math.max(...times).toFixed(2)} ms ` +
      `(after parsing: ${afterParse.toFixed(2)} ms) → ${first.action}${"reason" in first ? ` ${first.reason}` : ""}`,
  );
}
